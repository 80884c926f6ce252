"""Obstacle outputs -> 3D boxes in the camera, ego and global frames -> one set per sample.

NMS-free per image (sigmoid -> top-k over queries x classes; optionally a per-class 2D NMS,
``postprocess.obstacle_nms_iou``, for heads trained with one-to-many class targets), then the cameras of a sample are
merged in BEV: overlapping views see the same object twice, and the lower-scoring copy of a
same-class box whose centre lies within ``merge_radius`` metres is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import batched_nms, box_convert

from perception.core.nuscenes_constants import DETECTION_CLASSES
from perception.core.obstacle_coding import ATTRIBUTE_NAMES, CLASS_ATTRIBUTES, decode_depth
from perception.postprocess.ground_depth import GroundDepth, fuse_ground_depth
from perception.postprocess.top_k import top_k_detections

MERGE_RADIUS = {"pedestrian": 0.5, "traffic_cone": 0.4, "barrier": 0.8, "bicycle": 0.7, "motorcycle": 0.8}
DEFAULT_MERGE_RADIUS = 1.5
_ALLOWED_ATTRIBUTES = torch.tensor([[a in CLASS_ATTRIBUTES[c] for a in ATTRIBUTE_NAMES] for c in DETECTION_CLASSES])


@dataclass
class CameraBoxes:
    """Boxes of one image in its camera frame (x right, y down, z forward)."""

    center_cam: np.ndarray  # [N,3] metres
    size_wlh: np.ndarray  # [N,3] metres
    yaw_cam: np.ndarray  # [N] atan2(h_x, h_z)
    velocity_cam: np.ndarray  # [N,2] (v_x, v_z) m/s
    labels: np.ndarray  # [N] index into DETECTION_CLASSES
    scores: np.ndarray  # [N]
    attributes: list[str]  # [N] nuScenes attribute name or ""
    boxes_2d: np.ndarray | None = None  # [N,4] cxcywh in [0, 1] of the network input (decode_image, when output)


DEPTH_CONFIDENCE_RADIUS_M = 1.0  # within the devkit's 0.5-4 m matching distances


def depth_confidence(depth_m: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """[N] depths in metres and the head's log Laplace scale of their depth code -> [N] probability that the true
    depth is within DEPTH_CONFIDENCE_RADIUS_M: 1 - exp(-r / b_m), with b_m = depth x b the scale in metres (the code
    is log depth, so a code error e moves the depth by about depth x e). Why: the devkit matches by centre
    distance in metres, so a far box of the same class score is less likely a true positive (GUPNet and MonoFlex
    rank by class score x depth confidence the same way)."""
    scale_m = (depth_m * torch.exp(log_scale)).clamp(min=1e-6)
    return 1.0 - torch.exp(-DEPTH_CONFIDENCE_RADIUS_M / scale_m)


def decode_image(outputs: dict[str, torch.Tensor], index: int, intrinsics: np.ndarray, input_size: tuple[int, int],
                 max_detections: int = 100, score_threshold: float = 0.05, nms_iou: float | None = None,
                 use_depth_confidence: bool = False, ground: GroundDepth | None = None) -> CameraBoxes:
    """Top-k detections of image ``index`` of a batch; ``intrinsics`` of the network input. ``nms_iou``: also
    drop a detection whose 2D box overlaps a higher-scoring one of its class by more than this IoU (for heads
    trained with one-to-many class targets, whose duplicate queries score alike); None: NMS-free.
    ``use_depth_confidence``: where the outputs have ``obstacles.depth_log_scale``, multiply each score by
    ``depth_confidence`` and re-rank (top-k and NMS still go by class score). ``ground``: where the outputs have
    ``obstacles.bottom``, fuse the regressed depth with the ground plane's (postprocess/ground_depth.py)."""
    height, width = input_size
    scores, queries, labels = top_k_detections(outputs["obstacles.logits"][index], max_detections, score_threshold)
    if nms_iou is not None and len(scores):
        boxes = box_convert(outputs["obstacles.boxes"][index][queries].float(), "cxcywh", "xyxy")
        keep = batched_nms(boxes, scores, labels, nms_iou)  # sorted by score, like top-k
        scores, queries, labels = scores[keep], queries[keep], labels[keep]
    fx = float(intrinsics[0, 0])
    depth = decode_depth(outputs["obstacles.depth"][index][queries].float(), fx)
    uv = outputs["obstacles.center"][index][queries].float() * torch.tensor([width, height])
    size_wlh = outputs["obstacles.size"][index][queries].float().exp()
    if ground is not None and "obstacles.bottom" in outputs and len(depth):
        bottom_v = outputs["obstacles.bottom"][index][queries].float().numpy() * height
        depth = torch.from_numpy(fuse_ground_depth(depth.numpy().astype(np.float64), uv[:, 0].numpy(), bottom_v,
                                                   size_wlh[:, 2].numpy(), intrinsics, ground)).float()
    if use_depth_confidence and "obstacles.depth_log_scale" in outputs:  # class score x P(depth within 1 m)
        scores = scores * depth_confidence(depth, outputs["obstacles.depth_log_scale"][index][queries].float())
        order = torch.argsort(scores, descending=True, stable=True)  # best first, as without it
        scores, queries, labels, depth = scores[order], queries[order], labels[order], depth[order]
        uv, size_wlh = uv[order], size_wlh[order]
    pixels = torch.cat([uv, torch.ones_like(uv[:, :1])], dim=1).numpy()
    rays = pixels @ np.linalg.inv(intrinsics).T  # z = 1
    centre = rays * depth.numpy()[:, None]
    yaw = outputs["obstacles.yaw"][index][queries].float()
    attribute_logits = outputs["obstacles.attribute"][index][queries].float()
    allowed = _ALLOWED_ATTRIBUTES[labels]  # (N, A): only the attributes the devkit scores for the class
    best = attribute_logits.masked_fill(~allowed, float("-inf")).argmax(dim=1)
    attributes = [ATTRIBUTE_NAMES[b] if ok else "" for b, ok in zip(best.tolist(), allowed.any(dim=1).tolist())]
    return CameraBoxes(
        center_cam=centre, size_wlh=size_wlh.numpy(),
        yaw_cam=torch.atan2(yaw[:, 0], yaw[:, 1]).numpy(),
        velocity_cam=outputs["obstacles.velocity"][index][queries].float().numpy(),
        labels=labels.numpy(), scores=scores.numpy(), attributes=attributes,
        boxes_2d=outputs["obstacles.boxes"][index][queries].float().numpy() if "obstacles.boxes" in outputs else None)


def to_global(boxes: CameraBoxes, ego_from_camera: np.ndarray, global_from_ego: np.ndarray) -> list[dict]:
    """Boxes in the global frame as nuScenes detection records (without sample_token).

    The heading (sin yaw, 0, cos yaw) in the camera frame is taken to the global frame and
    flattened onto the ground plane, so small camera pitch/roll does not tilt the box.
    """
    if len(boxes.scores) == 0:
        return []
    global_from_camera = global_from_ego @ ego_from_camera
    rotation = global_from_camera[:3, :3]
    centre = boxes.center_cam @ rotation.T + global_from_camera[:3, 3]  # (N, 3)
    zeros = np.zeros_like(boxes.yaw_cam)
    heading = np.stack([np.sin(boxes.yaw_cam), zeros, np.cos(boxes.yaw_cam)], axis=1) @ rotation.T
    yaw = np.arctan2(heading[:, 1], heading[:, 0])
    quaternion = np.stack([np.cos(yaw / 2), zeros, zeros, np.sin(yaw / 2)], axis=1)  # (w, x, y, z) about +z
    velocity = np.stack([boxes.velocity_cam[:, 0], zeros, boxes.velocity_cam[:, 1]], axis=1) @ rotation.T
    return [{
        "translation": centre[i].tolist(), "size": boxes.size_wlh[i].tolist(), "rotation": quaternion[i].tolist(),
        "velocity": velocity[i, :2].tolist(), "detection_name": DETECTION_CLASSES[int(boxes.labels[i])],
        "detection_score": float(boxes.scores[i]), "attribute_name": boxes.attributes[i],
    } for i in range(len(boxes.scores))]


def merge_cameras(records: list[dict], max_boxes: int = 500, radius_scale: float = 1.0) -> list[dict]:
    """Greedy BEV de-duplication of one sample's boxes, all cameras together (highest score first): a box is dropped
    when a higher-scoring box of its class lies within its class's radius (``MERGE_RADIUS``) x ``radius_scale``.

    Overlapping views see one object twice, and one camera's queries can place one object twice where 2D NMS keeps
    both (their boxes overlap little); ``radius_scale`` > 1 merges those farther apart
    (``postprocess.obstacle_merge_radius_scale``; convergence study: a monocular head's copies of one object lie
    metres apart)."""
    if not records:
        return []
    records = sorted(records, key=lambda r: -r["detection_score"])
    centres = np.array([r["translation"][:2] for r in records])
    names = np.array([r["detection_name"] for r in records])
    radius = np.array([MERGE_RADIUS.get(n, DEFAULT_MERGE_RADIUS) for n in names]) * radius_scale
    suppressed = np.zeros(len(records), bool)
    kept = []
    for i in range(len(records)):
        if suppressed[i]:
            continue
        kept.append(records[i])
        if len(kept) == max_boxes:
            break
        close = (names == names[i]) & (np.linalg.norm(centres - centres[i], axis=1) < radius[i])
        suppressed |= close
    return kept
