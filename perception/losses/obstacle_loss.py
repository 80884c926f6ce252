"""Set criterion of the 3D obstacle head: the box-set losses plus 3D terms on matched queries."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert

from perception.core.obstacle_coding import NO_ATTRIBUTE, encode_depth
from perception.losses.box_set_loss import BoxSetCriterion

LOSS_NAMES = ("obstacle_cls", "obstacle_l1", "obstacle_giou", "obstacle_center", "obstacle_depth",
              "obstacle_size", "obstacle_yaw", "obstacle_velocity", "obstacle_attribute")


class ObstacleCriterion(BoxSetCriterion):
    task = "obstacles"
    loss_prefix = "obstacle"
    loss_names = LOSS_NAMES

    def encode_targets(self, per_image: list[dict], input_size: tuple[int, int], device) -> list[dict]:
        """Dataset targets (input-image pixels, camera frame) -> normalised network targets."""
        height, width = input_size
        # Lightning moves the whole batch to the accelerator: build on ``device`` and bring every target there.
        scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=device)
        encoded = []
        for t in per_image:
            t = {k: v.to(device) if torch.is_tensor(v) else v for k, v in t.items()}
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
        return encoded

    def extra_losses(self, pred, matched, batch_index, query_index, num_targets) -> dict[str, torch.Tensor]:
        if "center" not in pred:  # encoder proposals carry only classes and boxes
            return {}
        losses = {}
        for name in ("center", "depth", "size", "yaw", "velocity"):
            value = pred[name][batch_index, query_index]
            losses[f"obstacle_{name}"] = F.l1_loss(value, matched[name], reduction="sum") / num_targets
        attribute = matched["attribute"]
        has_attribute = attribute != NO_ATTRIBUTE
        if bool(has_attribute.any()):
            attribute_logits = pred["attribute"][batch_index, query_index][has_attribute]
            losses["obstacle_attribute"] = F.cross_entropy(attribute_logits, attribute[has_attribute],
                                                           reduction="sum") / num_targets
        return losses
