"""Drivable area: a CNN head over every FPN level, per-pixel 2-class logits at stride 4; IoU at the original size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from perception.core.errors import ConfigError
from perception.data.drivable_projection import IGNORE_INDEX
from perception.losses.drivable_loss import DrivableCriterion
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.tasks.base import ScoringContext, Task

DATASET_SUFFIX = {"nuscenes": "", "bdd100k": "_bdd100k"}  # metric name suffix per evaluated dataset


@dataclass
class DrivableHeadConfig:
    channels: int = 64
    num_classes: int = 2
    # The stride the FPN levels are merged and classified at: 4 (every level) or 8 (the stride-4 level left out and
    # not computed by a neck only this head reads; the logits upsampled to stride 4). models/heads/drivable.py.
    merge_stride: int = 4


class ValidationIoU:
    """Lightning's validation IoU at the network-input size (best.ckpt follows it)."""

    name, mode = "val/drivable_IoU", "max"

    def __init__(self):
        self.iou = BinaryIoU()

    def update(self, outputs: dict, targets: dict) -> None:
        target = targets["drivable"]
        valid = target["valid"]
        probability = drivable_probability(outputs["drivable.logits"], target["mask"].shape[-2:])
        self.iou.update(probability[valid] > 0.5, target["mask"][valid])

    def compute(self) -> float:
        return self.iou.compute()["IoU"]

    def reset(self) -> None:
        self.iou.reset()


class DrivableTask(Task):
    name = "drivable"
    config_class = DrivableHeadConfig
    enabled_by_default = True
    labelled_datasets = ("nuscenes", "bdd100k")
    loss_names = DrivableCriterion.loss_names
    output_meanings = {"drivable.logits": "[B,2,H/4,W/4] class logits at stride 4 of the input; softmax over dim 1, "
                                          "channel 1 = drivable"}
    class_names = {"drivable": ["not_drivable", "drivable"]}
    postprocess_code = "perception.postprocess.drivable.drivable_probability + to_original_image"

    def build_head(self, head: DrivableHeadConfig, in_channels: int, input_size: tuple[int, int]):
        from perception.models.heads.drivable import DrivableHead

        return DrivableHead(in_channels, head.channels, head.num_classes, head.merge_stride)

    def validate(self, head: DrivableHeadConfig, cfg) -> None:
        if head.merge_stride not in (4, 8):
            raise ConfigError(f"model.heads.drivable.merge_stride must be 4 or 8, got {head.merge_stride}")

    def build_criterion(self, cfg):
        return DrivableCriterion()

    def item_targets(self, dataset, info: dict, out: dict) -> dict | None:
        if out["mask"] is None:  # the transform's mask slot holds the drivable mask (None: not labelled)
            return None
        # uint8 [H,W] input px (0, 1, IGNORE_INDEX): an eighth of int64's bytes through the loader's queue
        return {"valid": True, "mask": torch.from_numpy(out["mask"])}

    def collate(self, targets: list[dict], input_size: tuple[int, int]) -> dict:
        """Dense: masks stacked to [B,H,W]; an image without labels contributes an all-ignore mask."""
        ignore = torch.full(tuple(input_size), IGNORE_INDEX, dtype=torch.uint8)
        return {"valid": torch.tensor([bool(t["valid"]) for t in targets]),
                "mask": torch.stack([t["mask"] if "mask" in t else ignore for t in targets])}

    def validation_metric(self) -> ValidationIoU:
        return ValidationIoU()

    def decode(self, outputs, i, input_size, affine, orig_size, post, input_intrinsics=None) -> np.ndarray:
        """uint8 [H0,W0], 1 = drivable."""
        probability = drivable_probability(outputs["drivable.logits"][i:i + 1], tuple(input_size))[0].numpy()
        return to_original_image(probability, affine, orig_size)

    def draw(self, canvas, prediction, intrinsics, min_score) -> None:
        from perception.drawing import draw_drivable

        draw_drivable(canvas, prediction)

    def image_result(self, cfg, dataset, outputs, i, meta, info) -> dict:
        truth = dataset.read_drivable_truth(meta)
        if truth is None:
            return {}
        counts = BinaryIoU()
        counts.update(self.decode(outputs, i, cfg.input_size, meta["affine"], meta["orig_size"], cfg.postprocess),
                      truth)
        return {"drivable": (counts.tp, counts.fp, counts.fn, counts.tn)}

    def score(self, results: list[dict], context: ScoringContext) -> dict[str, float]:
        metrics = {}
        for dataset, suffix in DATASET_SUFFIX.items():
            counts = [r["drivable"] for r in results if r["dataset"] == dataset and "drivable" in r]
            if counts:
                iou = BinaryIoU()
                iou.tp, iou.fp, iou.fn, iou.tn = (int(sum(c[k] for c in counts)) for k in range(4))
                metrics.update({f"drivable/{k}{suffix}": v for k, v in iou.compute().items()})
        return metrics


DRIVABLE = DrivableTask()
