"""NMS-free decoding shared by the DETR-style box heads: sigmoid -> top-k over queries x classes."""

from __future__ import annotations

import torch


def top_k_detections(logits: torch.Tensor, max_detections: int,
                     score_threshold: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [Q,C] -> (scores [N], query indices [N], class indices [N]), best first, scores above the threshold."""
    num_classes = logits.shape[-1]
    scores, flat = logits.float().sigmoid().flatten().topk(min(max_detections, logits.numel()))
    keep = scores > score_threshold
    scores, flat = scores[keep], flat[keep]
    return scores, flat // num_classes, flat % num_classes
