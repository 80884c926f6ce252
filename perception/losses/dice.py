"""Soft Dice loss shared by the mask criteria (drivable area, the lane head's auxiliary marking mask)."""

from __future__ import annotations

import torch


def soft_dice_loss(probability: torch.Tensor, target: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """1 - (2 |P.T| + 1) / (|P| + |T| + 1), summed over ``dims`` (the +1 keeps an empty mask defined)."""
    intersection = (probability * target).sum(dim=dims)
    denominator = probability.sum(dim=dims) + target.sum(dim=dims)
    return 1.0 - (2.0 * intersection + 1.0) / (denominator + 1.0)
