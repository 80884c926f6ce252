"""CNN drivable-area head: merge the FPN levels at stride 4 or 8 (Panoptic-FPN style), classify pixels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_gn_relu(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.GroupNorm(8, c_out),
                         nn.ReLU(inplace=True))


class DrivableHead(nn.Module):
    """FPN levels -> ``drivable.logits`` [B,num_classes,H/4,W/4] (class 1 = drivable).

    ``merge_stride``: the stride the levels are merged and classified at. 4 reads every level; 8 leaves out the
    stride-4 level and upsamples the logits (bilinear, x2) to stride 4, so the output and the loss are the same.
    Why 8: at stride 4 the head's two 3x3 convs and the neck's stride-4 output conv, its only reader, are 0.35 of the
    demo network's 2.5 GFLOPs per image, and a road surface has few details a stride-8 map misses.
    """

    def __init__(self, in_channels: int, channels: int = 64, num_classes: int = 2, merge_stride: int = 4,
                 num_levels: int = 4):
        super().__init__()
        if merge_stride not in (4, 8):
            raise ValueError(f"DrivableHead merge_stride must be 4 or 8, got {merge_stride}")
        self.first_level = {4: 0, 8: 1}[merge_stride]
        self.num_levels = num_levels
        # One reduce conv per level, built for every level and the unread ones dropped after, so the weights
        # initialised after this head draw the same random numbers at either stride.
        self.reduce = nn.ModuleList(_conv_gn_relu(in_channels, channels) for _ in range(num_levels))
        self.fuse = _conv_gn_relu(channels, channels)
        self.classifier = nn.Conv2d(channels, num_classes, 1)
        for i in range(self.first_level):
            self.reduce[i] = nn.Identity()

    def input_levels(self) -> tuple[int, ...]:
        """The FPN levels read (a neck computes only these)."""
        return tuple(range(self.first_level, self.num_levels))

    def forward(self, levels: list[torch.Tensor | None]) -> dict[str, torch.Tensor]:
        first = self.first_level
        size = levels[first].shape[-2:]  # the merge stride
        merged = sum(F.interpolate(self.reduce[i](levels[i]), size=size, mode="bilinear", align_corners=False)
                     if i > first else self.reduce[i](levels[i]) for i in range(first, self.num_levels))
        logits = self.classifier(self.fuse(merged))
        if self.first_level:  # [B,num_classes,H/8,W/8] -> stride 4, the output's contract
            logits = F.interpolate(logits, scale_factor=2.0, mode="bilinear", align_corners=False)
        return {"drivable.logits": logits}
