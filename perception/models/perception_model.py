"""The multi-task network: backbone -> FPN -> task heads, returning one flat dict of named tensors."""

from __future__ import annotations

import torch
from torch import nn


class PerceptionModel(nn.Module):
    """``forward(images [B,3,H,W]) -> {"<task>.<output>": tensor}``; a flat dict exports to ONNX
    with named outputs. Camera geometry never enters the network."""

    def __init__(self, backbone: nn.Module, neck: nn.Module, heads: dict[str, nn.Module]):
        super().__init__()
        self.backbone = backbone
        self.neck = neck
        self.heads = nn.ModuleDict(heads)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        levels = self.neck(self.backbone(images))
        outputs: dict[str, torch.Tensor] = {}
        for head in self.heads.values():
            outputs.update(head(levels))
        return outputs
