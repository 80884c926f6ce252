"""Run a model over a split and score it; metrics come back as a flat dict ``task/metric``.

Drivable area is scored at the original image resolution; obstacles are written as a
nuScenes submission JSON and scored by the official devkit's DetectionEval.
"""

from __future__ import annotations

import json
import os
import time

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader

from perception.build import build_datamodule, build_model
from perception.config import ExperimentConfig
from perception.data.camera_dataset import collate_camera_batch
from perception.evaluation.checkpoint import load_model_weights
from perception.evaluation.nuscenes_detection import run_detection_eval, write_submission
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.postprocess.obstacles import decode_image, merge_cameras, to_global


@torch.no_grad()
def evaluate(cfg: ExperimentConfig, checkpoint_path: str, work_dir: str, split: str | None = None,
             batch_size: int | None = None, num_workers: int | None = None, format_only: bool = False,
             results_path: str | None = None, predictor=None) -> dict[str, float]:
    """Metrics on ``split`` (default: the config's val split).

    ``predictor`` (images -> outputs dict) replaces the PyTorch model when given, e.g. an
    ONNX Runtime session wrapper; post-processing and scoring are the same.
    """
    split = split or cfg.val_split
    if predictor is None:
        model = build_model(cfg.model, tuple(cfg.input_size))
        load_model_weights(model, checkpoint_path)
        predictor = model.eval()
    dataset = build_datamodule(cfg).dataset("val", split=split)
    loader = DataLoader(dataset, batch_size=batch_size or cfg.val_batch_size, shuffle=False,
                        num_workers=cfg.num_workers if num_workers is None else num_workers,
                        collate_fn=collate_camera_batch)
    input_size = tuple(cfg.input_size)
    iou = BinaryIoU()
    per_sample: dict[str, list[dict]] = {}
    timings = {"model_s": 0.0, "postprocess_s": 0.0, "devkit_s": 0.0}
    images = 0
    for batch in loader:
        start = time.perf_counter()
        outputs = predictor(batch["images"])
        timings["model_s"] += time.perf_counter() - start
        start = time.perf_counter()
        if "drivable.logits" in outputs:
            probability = drivable_probability(outputs["drivable.logits"], input_size).numpy()
            for p, meta in zip(probability, batch["meta"]):
                truth = cv2.imread(meta["drivable_mask_path"], cv2.IMREAD_UNCHANGED)
                iou.update(to_original_image(p, meta["affine"], meta["orig_size"]), truth)
        if "obstacles.logits" in outputs:
            for i, meta in enumerate(batch["meta"]):
                boxes = decode_image(outputs, i, meta["intrinsics"], input_size,
                                     cfg.postprocess.obstacle_max_per_image, cfg.postprocess.obstacle_score_threshold)
                per_sample.setdefault(meta["sample_token"], []).extend(
                    to_global(boxes, meta["ego_from_camera"], meta["global_from_ego"]))
        timings["postprocess_s"] += time.perf_counter() - start
        images += len(batch["meta"])

    metrics: dict[str, float] = {}
    if cfg.model.heads.drivable is not None:
        metrics.update({f"drivable/{k}": v for k, v in iou.compute().items()})
    if cfg.model.heads.obstacles is not None:
        start = time.perf_counter()
        sample_tokens = list(dict.fromkeys(info["sample_token"] for info in dataset.infos))
        merged = {token: merge_cameras(boxes) for token, boxes in per_sample.items()}
        results_path = results_path or os.path.join(work_dir, f"results_nusc_{split}.json")
        write_submission(merged, sample_tokens, results_path)
        timings["postprocess_s"] += time.perf_counter() - start
        if not format_only:
            start = time.perf_counter()
            metrics.update(score_detections(cfg, results_path, split, work_dir))
            timings["devkit_s"] += time.perf_counter() - start
    metrics["eval/num_images"] = float(images)
    metrics.update({f"eval/{k}": v for k, v in timings.items()})
    return metrics


def score_detections(cfg: ExperimentConfig, results_path: str, split: str, work_dir: str) -> dict[str, float]:
    from perception.data.tables import load_nuscenes

    nusc = load_nuscenes(cfg.data_root, cfg.version)
    output_dir = os.path.join(work_dir, f"nuscenes_eval_{split}")
    os.makedirs(output_dir, exist_ok=True)
    return run_detection_eval(nusc, results_path, split, output_dir)


def write_metrics(metrics: dict[str, float], work_dir: str) -> str:
    os.makedirs(work_dir, exist_ok=True)
    path = os.path.join(work_dir, "metrics.json")
    with open(path, "w") as f:
        json.dump({k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in metrics.items()}, f, indent=2,
                  sort_keys=True)
    return path


def format_table(metrics: dict[str, float]) -> str:
    width = max(len(k) for k in metrics)
    return "\n".join(f"{k:<{width}}  {v:.4f}" for k, v in sorted(metrics.items()))
