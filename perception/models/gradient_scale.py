"""Per-head weights on the gradient a head sends back into the shared backbone and FPN (training only).

Why: the heads share one trunk, and AdamW normalises each weight's update by the *sum* of the tasks'
gradients on it, so on the trunk the task with the largest gradient sets the direction. Measured on the
demo model (900 steps, held-out lane F1 0.13-0.15; 3 training batches): the light head's gradient on the
trunk had norm 22-34 (its dense focal loss over every stride-4 token), the obstacle head's 8-13, the lane
head's 4-7, the drivable head's 1-2.5. The same lane head trained without the two box heads reached 0.28.
A scale here changes only what reaches the trunk: the head's own weights see their full gradient, and the
forward pass (and the exported graph) is unchanged. Tried (README, convergence study): lights at 0.1 left
every held-out metric within the seed spread; both box heads at 0 gave lanes +0.04 and mAP 0.011, and on
run 13 (2026-12-06) lane F1 0.317 against 0.346 with mAP 0.025: the trunk's share is not what the lane head
alone (lanes_only, 0.505) gains. A neck of the lane head's own (``PerceptionModel.own_necks``) did more.

``normalise_gradient`` rescales one head's whole gradient into the trunk (all levels of the batch together) to a
fixed norm at every step, so that no head's size or spikes set the trunk's direction. Why: on run 13 the lanes
reached 0.455 (against 0.346) only with the box heads' gradients out of the trunk *and* the trunk clipped apart
from the light head's spikes (README, convergence study, box_heads_off_trunk_clip_per_part).
"""

from __future__ import annotations

import torch


class _ScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.factor, None


def scale_gradient(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Identity forward; the gradient flowing back through it is multiplied by ``factor`` (0: detached)."""
    if factor == 1.0:
        return x
    if factor == 0.0:
        return x.detach()
    return _ScaleGradient.apply(x, factor)


class _NormaliseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norm: float, *tensors: torch.Tensor):
        ctx.norm = norm
        return tuple(x.view_as(x) for x in tensors)

    @staticmethod
    def backward(ctx, *grads):
        present = [g for g in grads if g is not None]
        if not present:
            return (None, *grads)
        total = torch.sqrt(sum((g.float() ** 2).sum() for g in present))
        factor = ctx.norm / (total + 1e-12)
        return (None, *(None if g is None else g * factor.to(g.dtype) for g in grads))


def normalise_gradient(tensors: list[torch.Tensor], norm: float) -> list[torch.Tensor]:
    """Identity forward; in backward the gradient of all ``tensors`` together (one head's, at the trunk's levels
    [B,C,H,W] each) is rescaled to the L2 norm ``norm``, its direction kept. A zero gradient stays zero."""
    return list(_NormaliseGradient.apply(float(norm), *tensors))
