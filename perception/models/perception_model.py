"""The multi-task network: backbone -> FPN -> task heads, returning one flat dict of named tensors."""

from __future__ import annotations

import torch
from torch import nn

from perception.models.gradient_scale import normalise_gradient, scale_gradient


class PerceptionModel(nn.Module):
    """``forward(images [B,3,H,W]) -> {"<task>.<output>": tensor}``; a flat dict exports to ONNX
    with named outputs. Camera geometry never enters the network."""

    def __init__(self, backbone: nn.Module, neck: nn.Module, heads: dict[str, nn.Module],
                 trunk_gradient_scale: dict[str, float] | None = None, own_necks: dict[str, nn.Module] | None = None,
                 trunk_gradient_norm: float | None = None):
        """``trunk_gradient_scale``: head name -> factor on the gradient that head sends into the shared
        backbone and FPN in training (gradient_scale.py); heads not named keep 1. ``own_necks``: head name -> a
        feature pyramid of that head's own on the backbone's features, read instead of the shared ``neck``
        (the head then shares only the backbone; its trunk gradient scale applies to the backbone features).
        ``trunk_gradient_norm``: in training, each head's gradient into the trunk rescaled to this norm at every
        step before its trunk gradient scale (gradient_scale.normalise_gradient); None: as the loss gives it."""
        super().__init__()
        self.backbone = backbone
        self.neck = neck
        self.heads = nn.ModuleDict(heads)
        unknown = sorted(set(own_necks or {}) - set(heads))
        if unknown:
            raise ValueError(f"own_necks names {unknown}, which are not heads of this model ({sorted(heads)})")
        self.own_necks = nn.ModuleDict(own_necks or {})
        self.trunk_gradient_scale = {name: float(f) for name, f in (trunk_gradient_scale or {}).items()}
        self.trunk_gradient_norm = trunk_gradient_norm

    @property
    def denoising_tasks(self) -> tuple[str, ...]:
        """The heads that take denoising queries in training (``heads/denoising.py``)."""
        return tuple(name for name, head in self.heads.items() if getattr(head, "denoising", None) is not None)

    def forward(self, images: torch.Tensor, denoising: dict[str, list[dict]] | None = None,
                labelled: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``denoising`` (training only): per task in ``denoising_tasks``, its targets per image (labels [M],
        boxes [M,4] cxcywh in [0, 1]); the exported graph never has them. ``labelled`` (training only): per task,
        which images [B] (bool) carry its labels; that head then runs on those images alone (``run_on_images``)."""
        features = self.backbone(images)
        shared = self.neck(features) if len(self.own_necks) < len(self.heads) else None
        outputs: dict[str, torch.Tensor] = {}
        for name in self.heads:
            outputs.update(self.head_outputs(name, shared, denoising, labelled, features))
        return outputs

    def head_outputs(self, name: str, levels: list[torch.Tensor] | None, denoising: dict[str, list[dict]] | None = None,
                     labelled: dict[str, torch.Tensor] | None = None,
                     features: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """One head's outputs from the shared FPN ``levels`` (a head with a neck of its own: from that neck on the
        backbone ``features``), with its trunk gradient scale, denoising queries and labelled images applied as
        ``forward`` applies them (``bench/train_step_rate.py --parts`` times the heads one by one)."""
        own_neck = self.own_necks[name] if name in self.own_necks else None
        trunk = levels if own_neck is None else features
        factor = self.trunk_gradient_scale.get(name, 1.0)
        # Identity forwards: inference and export never see either. With a norm, the scale is the norm's factor.
        if self.training and self.trunk_gradient_norm is not None and factor != 0.0:
            trunk = _at_present(trunk, lambda present: normalise_gradient(present, self.trunk_gradient_norm * factor))
        elif self.training and factor != 1.0:
            trunk = _at_present(trunk, lambda present: [scale_gradient(x, factor) for x in present])
        head = self.heads[name] if own_neck is None else _with_neck(own_neck, self.heads[name])
        kwargs = {"denoising": denoising[name]} if denoising is not None and name in denoising else {}
        if labelled is not None and name in labelled:
            return run_on_images(head, trunk, labelled[name], **kwargs)
        return head(trunk, **kwargs)


def _at_present(levels: list[torch.Tensor | None], function) -> list[torch.Tensor | None]:
    """``function`` (a list of tensors -> as many tensors) applied to the levels a neck computed; the levels it left
    out (None) stay None."""
    present = [i for i, x in enumerate(levels) if x is not None]
    results = dict(zip(present, function([levels[i] for i in present])))
    return [results.get(i) for i in range(len(levels))]


def _with_neck(neck: nn.Module, head: nn.Module):
    """The head on its own neck's levels, called as a head is (so ``run_on_images`` runs both on the labelled
    images only)."""
    def run(features: list[torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        return head(neck(features), **kwargs)
    return run


def run_on_images(head, levels: list[torch.Tensor], labelled: torch.Tensor,
                  denoising: list[dict] | None = None) -> dict[str, torch.Tensor]:
    """The head's outputs (``head``: a head, or a head on a neck of its own, ``levels`` then the backbone's features)
    on the images where ``labelled`` [B] is True, scattered into batch-sized tensors whose
    other rows are zero. Why: in a mixed batch each task has labels on only some images (the demo: lights on
    44 %, obstacles on 56 %, lanes on 62 %), its criterion reads only those rows, and every head treats images
    independently (no batch statistics), so running it on the rest only cost time (the demo's training step:
    0.83x with it, measured side by side on the same batches). At least one image runs, so every weight is
    used in every step (DDP). Training only: the zero rows are not predictions."""
    first = next(level for level in levels if level is not None)  # a neck may leave levels out (None)
    batch = first.shape[0]
    index = torch.nonzero(labelled.to(first.device), as_tuple=False)[:, 0]
    if len(index) == 0:
        index = index.new_zeros(1)
    subset = len(index) < batch
    if subset:
        levels = [None if level is None else level.index_select(0, index) for level in levels]
        denoising = None if denoising is None else [denoising[i] for i in index.tolist()]
    outputs = head(levels) if denoising is None else head(levels, denoising=denoising)
    if not subset:
        return outputs
    return {name: value.new_zeros((batch, *value.shape[1:])).index_copy(0, index, value)
            for name, value in outputs.items()}
