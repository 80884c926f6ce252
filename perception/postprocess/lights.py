"""Traffic-light outputs -> boxes with a state in original-image pixels (top-k; a per-class NMS when the head was
trained with one-to-many class targets, ``postprocess.light_nms_iou``)."""

from __future__ import annotations

import numpy as np
import torch
from torchvision.ops import batched_nms, box_convert

from perception.postprocess.top_k import top_k_detections


def decode_lights(outputs: dict[str, torch.Tensor], index: int, input_size: tuple[int, int], affine: np.ndarray,
                  max_detections: int = 30, score_threshold: float = 0.05,
                  nms_iou: float | None = None) -> dict[str, np.ndarray]:
    """{"boxes_xyxy" [N,4] original px, "labels" [N] (LIGHT_STATES index), "scores" [N]} of image ``index``.
    ``nms_iou``: also drop a box overlapping a higher-scoring one of its state by more than this IoU (duplicates
    of a head trained one-to-many); None: NMS-free."""
    height, width = input_size
    scores, queries, labels = top_k_detections(outputs["lights.logits"][index], max_detections, score_threshold)
    boxes = box_convert(outputs["lights.boxes"][index][queries].float(), "cxcywh", "xyxy")  # (N, 4) in [0, 1]
    if nms_iou is not None and len(scores):
        keep = batched_nms(boxes, scores, labels, nms_iou)  # sorted by score, like top-k
        scores, labels, boxes = scores[keep], labels[keep], boxes[keep]
    boxes = boxes.numpy()
    boxes = boxes * np.array([width, height, width, height])  # input px
    inverse = np.linalg.inv(affine)
    corners = np.stack([boxes[:, :2], boxes[:, 2:]], 1) @ inverse[:2, :2].T + inverse[:2, 2]  # (N, 2, 2)
    boxes = np.concatenate([corners.min(1), corners.max(1)], 1)  # a mirrored affine swaps x0 and x1
    return {"boxes_xyxy": boxes, "labels": labels.numpy(), "scores": scores.numpy()}
