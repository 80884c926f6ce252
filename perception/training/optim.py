"""AdamW with decay / no-decay and backbone / rest parameter groups, warmup + cosine or linear decay per step."""

from __future__ import annotations

import math

import torch
from torch import nn

from perception.config import OptimizerConfig, SchedulerConfig

# Parameters that should not be decayed: norms, biases, Swin's position tables.
_NO_DECAY = ("norm", "bias", "relative_position_bias_table", "absolute_pos_embed")


def build_optimizer(model: nn.Module, cfg: OptimizerConfig, scheduler: SchedulerConfig, total_steps: int) -> dict:
    """Lightning's ``configure_optimizers`` dict; ``backbone.*`` parameters get ``backbone_lr_mult``, the weights of
    a head named in ``head_betas`` (``heads.<name>.*``) groups of their own with its betas."""
    head_betas = dict(cfg.head_betas or {})
    groups: dict[tuple[bool, str, bool], list] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        is_backbone = name.startswith("backbone.")
        parts = name.split(".")
        own = parts[1] if parts[0] == "heads" and len(parts) > 2 and parts[1] in head_betas else ""
        no_decay = parameter.ndim <= 1 or any(token in name for token in _NO_DECAY)
        groups.setdefault((is_backbone, own, no_decay), []).append(parameter)
    missing = sorted(set(head_betas) - {own for _, own, _ in groups})
    if missing:
        raise ValueError(f"optimizer.head_betas names {missing}, but the model has no trainable weights "
                         f"under heads.<name>; its heads are {sorted(getattr(model, 'heads', {}))}")
    # Named groups: LearningRateMonitor logs lr-AdamW/<name> (TensorBoard, CSV) per group.
    param_groups = [
        {"params": params, "name": _group_name(is_backbone, own, no_decay),
         "lr": cfg.lr * (cfg.backbone_lr_mult if is_backbone else 1.0),
         "weight_decay": 0.0 if no_decay else cfg.weight_decay,
         "betas": tuple(head_betas[own]) if own else tuple(cfg.betas)}
        for (is_backbone, own, no_decay), params in sorted(groups.items())
    ]
    optimizer = torch.optim.AdamW(param_groups, lr=cfg.lr, betas=tuple(cfg.betas))
    lr_lambda = warmup_then_decay(scheduler, max(int(total_steps), 1))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _group_name(is_backbone: bool, head: str, no_decay: bool) -> str:
    """backbone / heads / heads.<name> (a head with betas of its own), + _no_decay."""
    return ("backbone" if is_backbone else f"heads.{head}" if head else "heads") + ("_no_decay" if no_decay else "")


# Share of the decay still ahead, 1 -> 0, at progress 0 -> 1 through it.
_DECAY_SHAPES = {"cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
                 "linear": lambda progress: 1.0 - progress}


def warmup_then_decay(cfg: SchedulerConfig, total_steps: int):
    """LR multiplier per optimizer step: linear warmup, then ``cfg.decay`` (cosine or linear) down to min_lr_ratio."""
    remaining = _DECAY_SHAPES[cfg.decay]  # scheduler.decay, checked with the config (LR_DECAYS)
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))

    def factor(step: int) -> float:
        if step < warmup:
            return cfg.warmup_ratio + (1.0 - cfg.warmup_ratio) * step / max(warmup, 1)
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * remaining(progress)

    return factor
