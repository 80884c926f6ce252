"""Hungarian matching between queries and ground-truth boxes, one assignment per image."""

from __future__ import annotations

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

        Returns per image (query indices, target indices), both int64 [min(Q, M_i)].
        """
        batch, queries = logits.shape[:2]
        sizes = [len(t["labels"]) for t in targets]
        empty = torch.empty(0, dtype=torch.int64)
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
        cost = cost.view(batch, queries, -1).cpu()
        matches = []
        for i, block in enumerate(cost.split(sizes, dim=-1)):
            if sizes[i] == 0:
                matches.append((empty, empty))
                continue
            rows, cols = linear_sum_assignment(block[i].numpy())
            matches.append((torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64)))
        return matches
