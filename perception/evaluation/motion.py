"""Forecast every prediction agent of a split and score it with the nuScenes devkit's metrics.

The model (or any ``predictor``: inputs -> (trajectories [N,K,T,2], probabilities [N,K]) in the
agent frame) runs over the cached samples; trajectories go to the global frame and become the
devkit's ``Prediction`` records (written as the challenge submission JSON). The devkit's
``compute_metrics`` scores them (minADE_k, minFDE_k, MissRateTopK with 2 m tolerance, over the
top-k modes by probability), and its ``ConstantVelocityHeading`` baseline is scored the same way.
OffRoadRate is left out: it rasterises all four nuScenes city maps, which custom data lacks.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch

from perception.build import build_datamodule, build_motion_model, motion_settings
from perception.config import MotionExperimentConfig
from perception.core.checkpoint import load_model_weights
from perception.data.motion_datamodule import MODEL_INPUTS
from perception.data.motion_samples import to_global_frame
from perception.evaluation.evaluate import distributed_rank_and_world

K_TO_REPORT = (1, 5, 10)
MISS_TOLERANCE = 2.0


def devkit_prediction_config(seconds: float):
    from nuscenes.eval.prediction.config import PredictionConfig
    from nuscenes.eval.prediction.metrics import MinADEK, MinFDEK, MissRateTopK, RowMean

    k = list(K_TO_REPORT)
    return PredictionConfig([MinADEK(k, [RowMean()]), MinFDEK(k, [RowMean()]),
                             MissRateTopK(k, [RowMean()], tolerance=MISS_TOLERANCE)], seconds=int(seconds))


def flatten_devkit_metrics(results: dict, prefix: str) -> dict[str, float]:
    """{"MinADEK": {"RowMean": [k=1, 5, 10]}, ...} -> {prefix/minADE_5: ..., prefix/MissRate_2_5: ...}."""
    # The devkit names the miss-rate metric after its tolerance ("MissRateTopK_2.0").
    names = {"MinADEK": "minADE", "MinFDEK": "minFDE",
             f"MissRateTopK_{MISS_TOLERANCE:.1f}": f"MissRate_{MISS_TOLERANCE:g}"}
    flat = {}
    for metric, short in names.items():
        for k, value in zip(K_TO_REPORT, results[metric]["RowMean"]):
            flat[f"{prefix}/{short}_{k}"] = float(value)
    return flat


def to_devkit_predictions(tokens, trajectories: np.ndarray, probabilities: np.ndarray, translations,
                          rotations) -> list[dict]:
    """Serialised devkit ``Prediction`` records with global-frame trajectories [K,T,2]."""
    from nuscenes.eval.prediction.data_classes import Prediction

    records = []
    for token, modes, probs, translation, rotation in zip(tokens, trajectories, probabilities, translations,
                                                          rotations):
        instance, sample = token.split("_")
        global_modes = to_global_frame(modes.astype(np.float64), translation, rotation)
        records.append(Prediction(instance, sample, global_modes, probs.astype(np.float64)).serialize())
    return records


@torch.no_grad()
def forecast_arrays(predictor, arrays: dict, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    trajectories, probabilities = [], []
    for start in range(0, len(arrays["tokens"]), batch_size):
        inputs = [torch.from_numpy(np.ascontiguousarray(arrays[k][start:start + batch_size], dtype=np.float32))
                  for k in MODEL_INPUTS]
        t, p = predictor(*inputs)
        trajectories.append(np.asarray(t))
        probabilities.append(np.asarray(p))
    return np.concatenate(trajectories), np.concatenate(probabilities)


def evaluate_motion(cfg: MotionExperimentConfig, checkpoint_path: str, work_dir: str, split: str | None = None,
                    batch_size: int | None = None, format_only: bool = False, results_path: str | None = None,
                    predictor=None) -> dict[str, float]:
    """Metrics of the model (``motion/*``) and of the devkit's constant-velocity baseline (``motion_cv/*``)."""
    from nuscenes.eval.prediction.compute_metrics import compute_metrics
    from nuscenes.prediction import PredictHelper
    from nuscenes.prediction.models.physics import ConstantVelocityHeading

    from perception.data.tables import load_nuscenes

    split = split or cfg.val_split
    if distributed_rank_and_world()[0] != 0:
        return {}  # forecasting a split takes seconds: under torchrun, rank 0 does it alone
    if predictor is None:
        model = build_motion_model(cfg)
        load_model_weights(model, checkpoint_path)
        predictor = model.eval().forecast
    arrays = build_datamodule(cfg).arrays(split)
    timings = {}
    start = time.perf_counter()
    trajectories, probabilities = forecast_arrays(predictor, arrays, batch_size or cfg.val_batch_size)
    timings["model_s"] = time.perf_counter() - start
    predictions = to_devkit_predictions(arrays["tokens"], trajectories, probabilities, arrays["translation"],
                                        arrays["rotation"])
    results_path = results_path or os.path.join(work_dir, f"results_motion_{split}.json")
    os.makedirs(os.path.dirname(os.path.abspath(results_path)), exist_ok=True)
    with open(results_path, "w") as f:
        json.dump(predictions, f)
    metrics: dict[str, float] = {"eval/num_agents": float(len(predictions))}
    if format_only:
        return metrics

    start = time.perf_counter()
    nusc = load_nuscenes(cfg.data_root, cfg.version)
    helper = PredictHelper(nusc)
    config = devkit_prediction_config(motion_settings(cfg).future_seconds)
    metrics.update(flatten_devkit_metrics(compute_metrics(predictions, helper, config), "motion"))
    baseline = ConstantVelocityHeading(config.seconds, helper)
    baseline_predictions = [baseline(token).serialize() for token in arrays["tokens"]]
    metrics.update(flatten_devkit_metrics(compute_metrics(baseline_predictions, helper, config), "motion_cv"))
    timings["devkit_s"] = time.perf_counter() - start
    metrics.update({f"eval/{k}": v for k, v in timings.items()})
    return metrics
