"""CNN drivable-area head: merge all FPN levels at stride 4 (Panoptic-FPN style), classify pixels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_gn_relu(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.GroupNorm(8, c_out),
                         nn.ReLU(inplace=True))


class DrivableHead(nn.Module):
    """FPN levels -> ``drivable.logits`` [B,num_classes,H/4,W/4] (class 1 = drivable)."""

    def __init__(self, in_channels: int, channels: int = 64, num_classes: int = 2):
        super().__init__()
        self.reduce = nn.ModuleList(_conv_gn_relu(in_channels, channels) for _ in range(4))
        self.fuse = _conv_gn_relu(channels, channels)
        self.classifier = nn.Conv2d(channels, num_classes, 1)

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        size = levels[0].shape[-2:]  # stride 4
        merged = sum(F.interpolate(conv(x), size=size, mode="bilinear", align_corners=False) if i else conv(x)
                     for i, (conv, x) in enumerate(zip(self.reduce, levels)))
        return {"drivable.logits": self.classifier(self.fuse(merged))}
