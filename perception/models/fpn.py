"""Feature pyramid: lateral 1x1 convs, top-down nearest upsampling, 3x3 output convs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FPN(nn.Module):
    """in_channels from the backbone's feature_info; every output level has ``channels``.

    Keep ``channels`` modest: at stride 4 the 3x3 output conv dominates the neck's cost
    (C=256 at 384x640 costs more than half of Swin-T itself).
    """

    def __init__(self, in_channels: list[int], channels: int):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in in_channels)
        self.output = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.GroupNorm(8, channels),
                          nn.ReLU(inplace=True)) for _ in in_channels)
        self.channels = channels

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """features [B,C_i,H_i,W_i] fine to coarse -> P levels [B,channels,H_i,W_i]."""
        laterals = [conv(f) for conv, f in zip(self.lateral, features)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=laterals[i - 1].shape[-2:],
                                                              mode="nearest")
        return [conv(x) for conv, x in zip(self.output, laterals)]
