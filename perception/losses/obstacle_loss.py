"""Set criterion of the 3D obstacle head: the box-set losses plus 3D terms on matched queries."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert

from perception.core.obstacle_coding import NO_ATTRIBUTE, encode_depth
from perception.losses.box_set_loss import BoxSetCriterion

LOSS_NAMES = ("obstacle_cls", "obstacle_l1", "obstacle_giou", "obstacle_center", "obstacle_depth",
              "obstacle_size", "obstacle_yaw", "obstacle_velocity", "obstacle_attribute", "obstacle_bottom")


def bottom_rows(centre_cam: torch.Tensor, height_m: torch.Tensor, intrinsics: torch.Tensor) -> torch.Tensor:
    """centre_cam [N,3] (camera frame, y down), height_m [N], intrinsics [3,3] of the input -> [N] input-pixel row
    of each box's bottom centre: the centre moved h/2 along the camera's y (down for a level camera)."""
    depth = centre_cam[:, 2].clamp(min=0.1)
    return intrinsics[1, 1] * (centre_cam[:, 1] + 0.5 * height_m) / depth + intrinsics[1, 2]


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
            intrinsics = t["intrinsics"].float()
            fx = intrinsics[0, 0]
            encoded.append({
                "labels": t["labels"].long(),
                "boxes": box_convert(t["boxes_xyxy"].float() / scale, "xyxy", "cxcywh"),
                "center": t["center_uv"].float() / scale[:2],
                "depth": encode_depth(centre_cam[:, 2], fx),
                "size": t["size_wlh"].float().clamp(min=0.05).log(),
                "yaw": torch.stack([t["yaw"].sin(), t["yaw"].cos()], -1).float(),
                "velocity": t["velocity"].float(),
                "attribute": t["attributes"].long(),
                "bottom": bottom_rows(centre_cam, t["size_wlh"][:, 2].float(), intrinsics) / height,
            })
        return encoded

    @staticmethod
    def yaw_bin_loss(logits: torch.Tensor, per_bin: torch.Tensor, target: torch.Tensor,
                     num_targets: int) -> torch.Tensor:
        """logits [M,K] of K bins, per_bin [M,K,2] (sin, cos) of each bin's heading, target [M,2] (sin, cos):
        cross-entropy on the bin nearest the true heading + L1 of that bin's (sin, cos). A heading the image
        leaves ambiguous (front or back of a box) splits the bin probabilities instead of pulling a single
        (sin, cos) regression to their mean, which is what the direct regression did (norm ~0.3)."""
        bins = logits.shape[-1]
        angle = torch.atan2(target[:, 0], target[:, 1]) % (2 * math.pi)
        nearest = torch.round(angle / (2 * math.pi / bins)).long() % bins  # (M,)
        chosen = per_bin[torch.arange(len(nearest), device=nearest.device), nearest]  # (M, 2)
        return (F.cross_entropy(logits, nearest, reduction="sum")
                + F.l1_loss(chosen, target, reduction="sum")) / num_targets

    @staticmethod
    def laplace_depth_loss(depth: torch.Tensor, log_scale: torch.Tensor, target: torch.Tensor,
                           num_targets: int) -> torch.Tensor:
        """depth, log_scale, target [M] (depth codes; log_scale = log b): the Laplace negative log-likelihood
        sqrt(2) |depth - target| / b + log b (MonoDLE's form), minimal at b = sqrt(2) |error|. An object whose depth
        the image leaves open (truncated, hidden, far) gets a wide b and weighs less; a clear one pulls harder."""
        log_scale = log_scale.clamp(min=-6.0)  # b >= 0.25 %: bounded weight when an error happens to be ~0
        error = (depth - target).abs()
        return (math.sqrt(2.0) * error * torch.exp(-log_scale) + log_scale).sum() / num_targets

    def dense_extra_losses(self, pred, targets, batch_index, token_index, flat,
                           num_positive) -> dict[str, torch.Tensor]:
        """With the head's ``dense_depth``: L1 of each ATSS positive token's depth code against its object's."""
        if "depth" not in pred:
            return {}
        target = torch.cat([t["depth"] for t in targets])[flat]
        return {"obstacle_depth": F.l1_loss(pred["depth"][batch_index, token_index], target,
                                            reduction="sum") / num_positive}

    def extra_losses(self, pred, matched, batch_index, query_index, num_targets) -> dict[str, torch.Tensor]:
        if "center" not in pred:  # encoder proposals carry only classes and boxes
            return {}
        losses = {}
        for name in ("center", "depth", "size", "yaw", "velocity", "bottom"):
            if name not in pred:  # "bottom" only with the head's ground_keypoint
                continue
            value = pred[name][batch_index, query_index]
            if name == "depth" and "depth_log_scale" in pred:  # with a predicted scale: the Laplace NLL, not the L1
                losses["obstacle_depth"] = self.laplace_depth_loss(
                    value, pred["depth_log_scale"][batch_index, query_index], matched["depth"], num_targets)
            elif name == "yaw" and "yaw_bin_logits" in pred:  # MultiBin: the true bin's class and heading
                losses["obstacle_yaw"] = self.yaw_bin_loss(pred["yaw_bin_logits"][batch_index, query_index],
                                                           pred["yaw_per_bin"][batch_index, query_index],
                                                           matched["yaw"], num_targets)
            else:
                losses[f"obstacle_{name}"] = F.l1_loss(value, matched[name], reduction="sum") / num_targets
        attribute = matched["attribute"]
        has_attribute = attribute != NO_ATTRIBUTE
        if bool(has_attribute.any()):
            attribute_logits = pred["attribute"][batch_index, query_index][has_attribute]
            losses["obstacle_attribute"] = F.cross_entropy(attribute_logits, attribute[has_attribute],
                                                           reduction="sum") / num_targets
        return losses
