"""Hungarian matching between queries and ground-truth boxes, one assignment per image."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn
from torchvision.ops import box_convert, generalized_box_iou


def focal_class_cost(probability: torch.Tensor, labels: torch.Tensor, alpha: float, gamma: float) -> torch.Tensor:
    """probability [N,C] (sigmoid), labels [M] -> cost [N,M]: focal loss of calling the query that
    label minus the focal loss of calling it nothing (Deformable-DETR's class cost)."""
    negative = (1 - alpha) * probability ** gamma * -(1 - probability + 1e-8).log()
    positive = alpha * (1 - probability) ** gamma * -(probability + 1e-8).log()
    return positive[:, labels] - negative[:, labels]


def solve_assignments(blocks: list[torch.Tensor], device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Hungarian assignment of each image's cost matrix ``blocks[i]`` [Q, M_i] (M_i may be 0) -> per image
    (query indices, target indices), int64 [min(Q, M_i)] on ``device``.

    All costs go to the host in one copy and all indices come back in one: a copy per image would make the
    GPU drain its queue once per image (and the indices must live beside the outputs they index)."""
    if not blocks:
        return []
    host = torch.cat([block.reshape(-1).float() for block in blocks]).cpu().numpy()
    rows, cols, sizes, offset = [], [], [], 0
    for block in blocks:
        queries, count = block.shape
        if queries * count == 0:
            sizes.append(0)
            continue
        r, c = linear_sum_assignment(host[offset:offset + queries * count].reshape(queries, count))
        offset += queries * count
        rows.append(r)
        cols.append(c)
        sizes.append(len(r))
    if not rows:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return [(empty, empty) for _ in blocks]
    indices = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]).astype(np.int64)).to(device)
    return [(q, t) for q, t in zip(indices[0].split(sizes), indices[1].split(sizes))]


class HungarianMatcher(nn.Module):
    """Cost = focal-style class cost + L1 on cxcywh + (1 - GIoU), as in DETR / Deformable-DETR."""

    def __init__(self, cost_class: float = 2.0, cost_bbox: float = 5.0, cost_giou: float = 2.0, alpha: float = 0.25,
                 gamma: float = 2.0):
        super().__init__()
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
        self.alpha, self.gamma = alpha, gamma

    @torch.no_grad()
    def forward(self, logits: torch.Tensor, boxes: torch.Tensor,
                targets: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """logits [B,Q,C], boxes [B,Q,4] cxcywh; targets[i]: labels [M_i], boxes [M_i,4] cxcywh.

        Returns per image (query indices, target indices), both int64 [min(Q, M_i)] on the logits' device.
        """
        batch, queries = logits.shape[:2]
        sizes = [len(t["labels"]) for t in targets]
        empty = torch.empty(0, dtype=torch.int64, device=logits.device)
        if sum(sizes) == 0:
            return [(empty, empty) for _ in range(batch)]
        probability = logits.flatten(0, 1).float().sigmoid()  # (B*Q, C)
        out_boxes = boxes.flatten(0, 1).float()
        labels = torch.cat([t["labels"] for t in targets])
        target_boxes = torch.cat([t["boxes"] for t in targets]).float()
        cost_class = focal_class_cost(probability, labels, self.alpha, self.gamma)
        cost_bbox = torch.cdist(out_boxes, target_boxes, p=1)
        cost_giou = -generalized_box_iou(box_convert(out_boxes, "cxcywh", "xyxy"),
                                         box_convert(target_boxes, "cxcywh", "xyxy"))
        cost = self.cost_class * cost_class + self.cost_bbox * cost_bbox + self.cost_giou * cost_giou
        cost = cost.view(batch, queries, -1)
        return solve_assignments([block[i] for i, block in enumerate(cost.split(sizes, dim=-1))], logits.device)
