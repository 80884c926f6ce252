"""Every task criterion's losses for one batch of outputs.

A criterion is called ``criterion(outputs, targets)``. One that evaluates its head again on tokens it picks
itself (the query criteria's dense losses propose only for the tokens they read) sets ``reads_head = True``
and is also given its task's head: ``criterion(outputs, targets, head=heads[task])``.
"""

from __future__ import annotations

import torch
from torch import nn


def task_losses(criteria: dict[str, nn.Module], outputs: dict[str, torch.Tensor], targets: dict,
                heads: nn.ModuleDict) -> dict[str, torch.Tensor]:
    """{loss name: value} of every criterion (keyed by task, as ``heads``) on ``outputs``."""
    losses: dict[str, torch.Tensor] = {}
    for task, criterion in criteria.items():
        context = {"head": heads[task]} if getattr(criterion, "reads_head", False) else {}
        losses.update(criterion(outputs, targets, **context))
    return losses
