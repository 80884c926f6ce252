"""Run a model over a split and score it; metrics come back as a flat dict ``task/metric``."""

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
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability, to_original_image


@torch.no_grad()
def evaluate(cfg: ExperimentConfig, checkpoint_path: str, split: str | None = None, batch_size: int | None = None,
             num_workers: int | None = None, limit: int | None = None) -> dict[str, float]:
    """Metrics on ``split`` (default: the config's val split), scored at the original image size."""
    model = build_model(cfg.model, tuple(cfg.input_size))
    load_model_weights(model, checkpoint_path)
    model.eval()
    datamodule = build_datamodule(cfg)
    dataset = datamodule.dataset("val", split=split or cfg.val_split)
    if limit is not None:
        dataset.infos = dataset.infos[:limit]
    loader = DataLoader(dataset, batch_size=batch_size or cfg.val_batch_size, shuffle=False,
                        num_workers=cfg.num_workers if num_workers is None else num_workers,
                        collate_fn=collate_camera_batch)
    iou = BinaryIoU()
    timings = {"model_s": 0.0, "postprocess_s": 0.0}
    images = 0
    for batch in loader:
        start = time.perf_counter()
        outputs = model(batch["images"])
        timings["model_s"] += time.perf_counter() - start
        start = time.perf_counter()
        if "drivable.logits" in outputs:
            probability = drivable_probability(outputs["drivable.logits"], tuple(cfg.input_size)).numpy()
            for p, meta in zip(probability, batch["meta"]):
                prediction = to_original_image(p, meta["affine"], meta["orig_size"])
                truth = cv2.imread(meta["drivable_mask_path"], cv2.IMREAD_UNCHANGED)
                iou.update(prediction, truth)
        timings["postprocess_s"] += time.perf_counter() - start
        images += len(batch["meta"])
    metrics: dict[str, float] = {}
    if cfg.model.heads.drivable is not None:
        metrics.update({f"drivable/{k}": v for k, v in iou.compute().items()})
    metrics["eval/num_images"] = float(images)
    metrics.update({f"eval/{k}": v for k, v in timings.items()})
    return metrics


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
