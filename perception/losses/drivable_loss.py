"""Drivable-area criterion: cross-entropy + soft Dice, over samples that carry drivable labels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from perception.data.drivable_projection import IGNORE_INDEX
from perception.losses.dice import soft_dice_loss


class DrivableCriterion(nn.Module):
    loss_names = ("drivable_ce", "drivable_dice")

    def __init__(self, ignore_index: int = IGNORE_INDEX):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, outputs: dict[str, torch.Tensor], targets: dict) -> dict[str, torch.Tensor]:
        """outputs["drivable.logits"] [B,K,h,w]; targets["drivable"]: mask [B,H,W], valid [B]."""
        logits = outputs["drivable.logits"]
        valid = targets["drivable"]["valid"].to(logits.device)
        if not bool(valid.any()):  # no labels in this batch: contribute nothing, keep the graph
            zero = logits.sum() * 0.0
            return {"drivable_ce": zero, "drivable_dice": zero}
        logits = logits[valid]
        mask = targets["drivable"]["mask"].to(logits.device)[valid].long()  # batches carry uint8
        logits = F.interpolate(logits, size=mask.shape[-2:], mode="bilinear", align_corners=False)
        ce = F.cross_entropy(logits, mask, ignore_index=self.ignore_index)

        known = (mask != self.ignore_index).float()
        probability = logits.softmax(dim=1)[:, 1] * known
        target = (mask == 1).float() * known
        dice = soft_dice_loss(probability, target, dims=(1, 2))  # per image
        return {"drivable_ce": ce, "drivable_dice": dice.mean()}
