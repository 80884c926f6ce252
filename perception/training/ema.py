"""An exponential moving average of the model's weights (Polyak averaging), the weights evaluation and
export use when ``optimizer.ema_decay`` > 0.

Why: a short, noisy schedule (batch 8, a few hundred steps) ends on weights that carry the last batches'
noise; their running average generalises better for the same steps (RT-DETR, YOLOv5+, DINO keep one).
The decay ramps up with the update count, min(decay, (1 + t) / (10 + t)) (TensorFlow's and timm's
``ModelEmaV2`` warmup), so the randomly initialised weights of the first steps fade out quickly.

The average is a frozen copy of the model inside the LightningModule (``ema_model.*`` in the state dict):
checkpoints carry it and resume it exactly; ``perception.core.checkpoint.model_weights`` loads it in
place of the raw weights for evaluation, inference and export.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def ema_decay_at(update: int, decay: float) -> float:
    """The decay of update ``update`` (0-based): the ramp (1 + t) / (10 + t), capped at ``decay``."""
    return min(decay, (1.0 + update) / (10.0 + update))


def frozen_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` that no optimizer or gradient touches, in eval mode."""
    average = copy.deepcopy(model).eval()
    for parameter in average.parameters():
        parameter.requires_grad_(False)
    return average


@torch.no_grad()
def update_ema(average: nn.Module, model: nn.Module, decay: float) -> None:
    """average = decay * average + (1 - decay) * model, tensor by tensor; buffers (non-float ones included)
    are copied as they are."""
    averaged = list(average.parameters())
    current = [p.detach() for p in model.parameters()]
    torch._foreach_lerp_(averaged, current, 1.0 - decay)
    for mine, theirs in zip(average.buffers(), model.buffers()):
        mine.copy_(theirs)
