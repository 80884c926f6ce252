"""Set criterion of the 3D obstacle head: focal class loss, L1 + GIoU on 2D boxes, 3D terms.

Applied to the final decoder layer, every auxiliary layer and the selected encoder
proposals, each with its own Hungarian matching. Images without obstacle labels are left out
entirely; an image labelled with no obstacles still pushes every query to "nothing here".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss

from perception.models.heads.obstacle_coding import NO_ATTRIBUTE, encode_depth
from perception.training.matcher import HungarianMatcher

LOSS_NAMES = ("obstacle_cls", "obstacle_l1", "obstacle_giou", "obstacle_center", "obstacle_depth",
              "obstacle_size", "obstacle_yaw", "obstacle_velocity", "obstacle_attribute")


def _prefixes(outputs: dict) -> list[str]:
    prefixes = ["obstacles"]
    prefixes += sorted({k.rsplit(".", 1)[0] for k in outputs if k.startswith("obstacles.aux")})
    if "obstacles.enc.logits" in outputs:
        prefixes.append("obstacles.enc")
    return prefixes


class ObstacleCriterion(nn.Module):
    loss_names = LOSS_NAMES

    def __init__(self, matcher: HungarianMatcher | None = None, focal_alpha: float = 0.25, focal_gamma: float = 2.0):
        super().__init__()
        self.matcher = matcher or HungarianMatcher()
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma

    @staticmethod
    def encode_targets(per_image: list[dict], input_size: tuple[int, int], device) -> list[dict]:
        """Dataset targets (input-image pixels, camera frame) -> normalised network targets."""
        height, width = input_size
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        encoded = []
        for t in per_image:
            centre_cam = t["center_cam"].float()
            fx = t["intrinsics"][0, 0].float()
            encoded.append({
                "labels": t["labels"].long(),
                "boxes": box_convert(t["boxes_xyxy"].float() / scale, "xyxy", "cxcywh"),
                "center": t["center_uv"].float() / scale[:2],
                "depth": encode_depth(centre_cam[:, 2], fx),
                "size": t["size_wlh"].float().clamp(min=0.05).log(),
                "yaw": torch.stack([t["yaw"].sin(), t["yaw"].cos()], -1).float(),
                "velocity": t["velocity"].float(),
                "attribute": t["attributes"].long(),
            })
        return [{k: v.to(device) for k, v in e.items()} for e in encoded]

    def forward(self, outputs: dict[str, torch.Tensor], targets: dict) -> dict[str, torch.Tensor]:
        logits = outputs["obstacles.logits"]
        valid = targets["obstacles"]["valid"].to(logits.device)
        zero = logits.sum() * 0.0
        if not bool(valid.any()):
            return {name: zero for name in LOSS_NAMES}
        input_size = targets["obstacles"]["input_size"]
        per_image = [t for t, v in zip(targets["obstacles"]["per_image"], valid.tolist()) if v]
        encoded = self.encode_targets(per_image, input_size, logits.device)
        num_boxes = max(sum(len(t["labels"]) for t in encoded), 1)
        totals = {name: zero for name in LOSS_NAMES}
        for prefix in _prefixes(outputs):
            predictions = {k[len(prefix) + 1:]: v[valid] for k, v in outputs.items()
                           if k.startswith(prefix + ".") and k.count(".") == prefix.count(".") + 1}
            for name, value in self._losses(predictions, encoded, num_boxes).items():
                totals[name] = totals[name] + value
        return totals

    def _losses(self, pred: dict[str, torch.Tensor], targets: list[dict], num_boxes: int) -> dict[str, torch.Tensor]:
        matches = self.matcher(pred["logits"], pred["boxes"], targets)
        batch_index = torch.cat([torch.full_like(q, i) for i, (q, _) in enumerate(matches)])
        query_index = torch.cat([q for q, _ in matches])
        matched = {k: torch.cat([t[k][j] for t, (_, j) in zip(targets, matches)]) for k in targets[0]}

        target_classes = torch.zeros_like(pred["logits"])
        target_classes[batch_index, query_index, matched["labels"]] = 1.0
        losses = {"obstacle_cls": sigmoid_focal_loss(pred["logits"], target_classes, self.focal_alpha,
                                                     self.focal_gamma, reduction="sum") / num_boxes}
        boxes = pred["boxes"][batch_index, query_index]
        losses["obstacle_l1"] = F.l1_loss(boxes, matched["boxes"], reduction="sum") / num_boxes
        losses["obstacle_giou"] = generalized_box_iou_loss(
            box_convert(boxes, "cxcywh", "xyxy"), box_convert(matched["boxes"], "cxcywh", "xyxy"),
            reduction="sum") / num_boxes
        if "center" not in pred:  # encoder proposals carry only classes and boxes
            return losses
        for name in ("center", "depth", "size", "yaw", "velocity"):
            value = pred[name][batch_index, query_index]
            losses[f"obstacle_{name}"] = F.l1_loss(value, matched[name], reduction="sum") / num_boxes
        attribute = matched["attribute"]
        has_attribute = attribute != NO_ATTRIBUTE
        if bool(has_attribute.any()):
            attribute_logits = pred["attribute"][batch_index, query_index][has_attribute]
            losses["obstacle_attribute"] = F.cross_entropy(attribute_logits, attribute[has_attribute],
                                                           reduction="sum") / num_boxes
        return losses
