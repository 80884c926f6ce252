"""Feature pyramid: lateral 1x1 convs, top-down nearest upsampling, 3x3 output convs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from perception.core.checkpoint import declare_pruned_state


class FPN(nn.Module):
    """in_channels from the backbone's feature_info; every output level has ``channels``.

    Keep ``channels`` modest: at stride 4 the 3x3 output conv dominates the neck's cost
    (C=256 at 384x640 costs more than half of Swin-T itself).

    ``out_levels``: the levels a reader uses (a head's neck of its own: ``head.input_levels()``); the others
    are not computed and have no weights. Why: a weight that no loss reaches stops DDP at the first step
    ("parameters that were not used in producing the loss"), and their convolutions were wasted work (the
    obstacle head reads strides 8-32, so its stride-4 output conv never counted). A lateral conv stays while a
    finer kept level receives the top-down path through it.
    """

    def __init__(self, in_channels: list[int], channels: int, out_levels: tuple[int, ...] | None = None):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in in_channels)
        self.output = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.GroupNorm(8, channels),
                          nn.ReLU(inplace=True)) for _ in in_channels)
        self.channels = channels
        self.out_levels = tuple(range(len(in_channels)))
        self.keep_levels(self.out_levels if out_levels is None else out_levels)

    def keep_levels(self, out_levels) -> None:
        """Compute only ``out_levels`` from now on: the other levels' output convs, and the lateral convs no kept
        level needs, become identities without weights. Called once the readers are known, after the full pyramid
        was built, so the kept weights (and everything initialised after the neck) draw the same random numbers as
        before: seeded runs reproduce, and older checkpoints load."""
        levels = range(len(self.lateral))
        out_levels = tuple(sorted(set(out_levels)))
        if not out_levels or not set(out_levels) <= set(self.out_levels):
            raise ValueError(f"FPN out_levels {out_levels} must be a non-empty subset of {self.out_levels}")
        self.out_levels = out_levels
        pruned = []
        for i in levels:
            if i < self.out_levels[0]:
                self.lateral[i] = nn.Identity()
                pruned.append(f"lateral.{i}.")
            if i not in self.out_levels:
                self.output[i] = nn.Identity()
                pruned.append(f"output.{i}.")
        declare_pruned_state(self, tuple(pruned))

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """features [B,C_i,H_i,W_i] fine to coarse -> P levels [B,channels,H_i,W_i] (None where not in
        ``out_levels``)."""
        first = self.out_levels[0]
        laterals = [None] * first + [self.lateral[i](features[i]) for i in range(first, len(features))]
        for i in range(len(laterals) - 1, first, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=laterals[i - 1].shape[-2:],
                                                              mode="nearest")
        return [self.output[i](x) if i in self.out_levels else None for i, x in enumerate(laterals)]
