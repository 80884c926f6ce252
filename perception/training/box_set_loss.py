"""Set criteria of the DETR-style heads: the shared skeleton and the box heads' losses
(focal class loss, L1 + GIoU on 2D boxes).

Applied to the final decoder layer, every auxiliary layer and the selected encoder proposals,
each with its own Hungarian matching. Only images that carry the task's labels (``valid``)
count; an image labelled with no objects still pushes every query to "nothing here". A batch
without any labelled image gives zero losses that still touch every output of the head, so
data-parallel training sees a gradient (of zero) for every parameter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss

from perception.training.matcher import HungarianMatcher


def output_prefixes(outputs: dict, task: str) -> list[str]:
    """The final prefix, then ``<task>.aux{i}`` in order, then ``<task>.enc`` when present."""
    prefixes = [task]
    prefixes += sorted({k.rsplit(".", 1)[0] for k in outputs if k.startswith(f"{task}.aux")})
    if f"{task}.enc.logits" in outputs:
        prefixes.append(f"{task}.enc")
    return prefixes


def outputs_of(outputs: dict, prefix: str, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"logits": ..., "boxes": ...} of one prefix, restricted to the valid images."""
    depth = prefix.count(".") + 1
    return {k[len(prefix) + 1:]: v[valid] for k, v in outputs.items()
            if k.startswith(prefix + ".") and k.count(".") == depth}


def zero_touching(outputs: dict, task: str) -> torch.Tensor:
    """0.0 connected to every output of ``task`` (see the module docstring)."""
    return sum(v.sum() for k, v in outputs.items() if k.startswith(task + ".")) * 0.0


def gather_matched(matches: list[tuple[torch.Tensor, torch.Tensor]], targets: list[dict]):
    """(image index [K], query index [K], matched targets {key: [K,...]}) of per-image matches."""
    batch_index = torch.cat([torch.full_like(q, i) for i, (q, _) in enumerate(matches)])
    query_index = torch.cat([q for q, _ in matches])
    matched = {k: torch.cat([t[k][j] for t, (_, j) in zip(targets, matches)]) for k in targets[0]}
    return batch_index, query_index, matched


class SetCriterion(nn.Module):
    """Skeleton of a set criterion: keep the labelled images, encode their targets once, then
    match and score every prefix (final, auxiliary layers, proposals). Subclasses set ``task``
    and ``loss_names`` and implement ``encode`` and ``prefix_losses``."""

    task = ""  # key of the outputs and of the targets
    loss_names: tuple[str, ...] = ()

    def __init__(self, matcher: nn.Module, focal_alpha: float = 0.25, focal_gamma: float = 2.0):
        super().__init__()
        self.matcher = matcher
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma

    def encode(self, per_image: list[dict], input_size: tuple[int, int], outputs: dict, device) -> list[dict]:
        raise NotImplementedError

    def prefix_losses(self, pred: dict[str, torch.Tensor], targets: list[dict],
                      num_targets: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def class_loss(self, logits: torch.Tensor, batch_index: torch.Tensor, query_index: torch.Tensor,
                   labels: torch.Tensor, num_targets: int) -> torch.Tensor:
        """Sigmoid focal loss: matched queries towards their class, every other query towards nothing."""
        target_classes = torch.zeros_like(logits)
        target_classes[batch_index, query_index, labels] = 1.0
        return sigmoid_focal_loss(logits, target_classes, self.focal_alpha, self.focal_gamma,
                                  reduction="sum") / num_targets

    def forward(self, outputs: dict[str, torch.Tensor], targets: dict) -> dict[str, torch.Tensor]:
        logits = outputs[f"{self.task}.logits"]
        valid = targets[self.task]["valid"].to(logits.device)
        zero = zero_touching(outputs, self.task)
        if not bool(valid.any()):
            return {name: zero for name in self.loss_names}
        per_image = [t for t, v in zip(targets[self.task]["per_image"], valid.tolist()) if v]
        encoded = self.encode(per_image, targets[self.task]["input_size"], outputs, logits.device)
        num_targets = max(sum(len(t["labels"]) for t in encoded), 1)
        totals = {name: zero for name in self.loss_names}
        for prefix in output_prefixes(outputs, self.task):
            for name, value in self.prefix_losses(outputs_of(outputs, prefix, valid), encoded, num_targets).items():
                totals[name] = totals[name] + value
        return totals


class BoxSetCriterion(SetCriterion):
    """2D boxes: focal class loss, L1 + GIoU; subclasses add per-query terms (``extra_losses``)."""

    loss_prefix = ""

    def __init__(self, matcher: HungarianMatcher | None = None, focal_alpha: float = 0.25, focal_gamma: float = 2.0):
        super().__init__(matcher or HungarianMatcher(), focal_alpha, focal_gamma)

    def encode_targets(self, per_image: list[dict], input_size: tuple[int, int], device) -> list[dict]:
        """Dataset targets (xyxy input-image pixels) -> labels and normalised cxcywh boxes."""
        height, width = input_size
        scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=device)
        return [{"labels": t["labels"].long().to(device),
                 "boxes": box_convert(t["boxes_xyxy"].float().to(device) / scale, "xyxy", "cxcywh")}
                for t in per_image]

    def encode(self, per_image: list[dict], input_size: tuple[int, int], outputs: dict, device) -> list[dict]:
        return self.encode_targets(per_image, input_size, device)

    def prefix_losses(self, pred: dict[str, torch.Tensor], targets: list[dict],
                      num_targets: int) -> dict[str, torch.Tensor]:
        matches = self.matcher(pred["logits"], pred["boxes"], targets)
        batch_index, query_index, matched = gather_matched(matches, targets)
        p = self.loss_prefix
        losses = {f"{p}_cls": self.class_loss(pred["logits"], batch_index, query_index, matched["labels"],
                                              num_targets)}
        boxes = pred["boxes"][batch_index, query_index]
        losses[f"{p}_l1"] = F.l1_loss(boxes, matched["boxes"], reduction="sum") / num_targets
        losses[f"{p}_giou"] = generalized_box_iou_loss(
            box_convert(boxes, "cxcywh", "xyxy"), box_convert(matched["boxes"], "cxcywh", "xyxy"),
            reduction="sum") / num_targets
        losses.update(self.extra_losses(pred, matched, batch_index, query_index, num_targets))
        return losses

    def extra_losses(self, pred, matched, batch_index, query_index, num_targets) -> dict[str, torch.Tensor]:
        """Losses on per-query outputs beyond class and box (none here)."""
        return {}


class LightCriterion(BoxSetCriterion):
    """Traffic lights: the class is the light's state (perception.models.heads.lights.LIGHT_STATES)."""

    task = "lights"
    loss_prefix = "light"
    loss_names = ("light_cls", "light_l1", "light_giou")
