"""Intersection-over-union for binary masks with an ignore label, accumulated over a split."""

from __future__ import annotations

import numpy as np
import torch


class BinaryIoU:
    """IoU of the positive class = TP / (TP + FP + FN), summed over all pixels seen."""

    def __init__(self, ignore_index: int = 255):
        self.ignore_index = ignore_index
        self.reset()

    def reset(self) -> None:
        self.tp = self.fp = self.fn = self.tn = 0

    def update(self, prediction, target) -> None:
        """prediction: bool/0-1 [...]; target: 0/1/ignore [...] of the same shape."""
        if isinstance(prediction, torch.Tensor):
            prediction, target = prediction.detach().cpu().numpy(), target.detach().cpu().numpy()
        if prediction.shape != target.shape:
            raise ValueError(f"prediction {prediction.shape} and target {target.shape} differ in shape")
        known = target != self.ignore_index
        positive = prediction.astype(bool) & known
        truth = (target == 1) & known
        self.tp += int(np.count_nonzero(positive & truth))
        self.fp += int(np.count_nonzero(positive & ~truth))
        self.fn += int(np.count_nonzero(~positive & truth))
        self.tn += int(np.count_nonzero(known & ~positive & ~truth))

    def compute(self) -> dict[str, float]:
        union = self.tp + self.fp + self.fn
        iou = self.tp / union if union else float("nan")
        negatives_union = self.tn + self.fp + self.fn
        return {
            "IoU": iou,
            "precision": self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan"),
            "recall": self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan"),
            "mIoU": (iou + self.tn / negatives_union) / 2 if union and negatives_union else float("nan"),
        }
