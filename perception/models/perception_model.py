"""The multi-task network: backbone -> FPN -> task heads, returning one flat dict of named tensors."""

from __future__ import annotations

import torch
from torch import nn

from perception.models.gradient_scale import scale_gradient


class PerceptionModel(nn.Module):
    """``forward(images [B,3,H,W]) -> {"<task>.<output>": tensor}``; a flat dict exports to ONNX
    with named outputs. Camera geometry never enters the network."""

    def __init__(self, backbone: nn.Module, neck: nn.Module, heads: dict[str, nn.Module],
                 trunk_gradient_scale: dict[str, float] | None = None):
        """``trunk_gradient_scale``: head name -> factor on the gradient that head sends into the shared
        backbone and FPN in training (gradient_scale.py); heads not named keep 1."""
        super().__init__()
        self.backbone = backbone
        self.neck = neck
        self.heads = nn.ModuleDict(heads)
        self.trunk_gradient_scale = {name: float(f) for name, f in (trunk_gradient_scale or {}).items()}

    @property
    def denoising_tasks(self) -> tuple[str, ...]:
        """The heads that take denoising queries in training (``heads/denoising.py``)."""
        return tuple(name for name, head in self.heads.items() if getattr(head, "denoising", None) is not None)

    def forward(self, images: torch.Tensor, denoising: dict[str, list[dict]] | None = None) -> dict[str, torch.Tensor]:
        """``denoising`` (training only): per task in ``denoising_tasks``, its targets per image (labels [M],
        boxes [M,4] cxcywh in [0, 1]); the exported graph never has them."""
        levels = self.neck(self.backbone(images))
        outputs: dict[str, torch.Tensor] = {}
        for name, head in self.heads.items():
            head_levels = levels
            factor = self.trunk_gradient_scale.get(name, 1.0)
            if self.training and factor != 1.0:  # identity forward: inference and export never see it
                head_levels = [scale_gradient(level, factor) for level in levels]
            if denoising is not None and name in denoising:
                outputs.update(head(head_levels, denoising=denoising[name]))
            else:
                outputs.update(head(head_levels))
        return outputs
