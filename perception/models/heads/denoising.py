"""Denoising queries for the box heads (DN-DETR / DINO; training only, absent from the exported graph).

Beside the selected queries, the decoder gets noised copies of the ground-truth boxes: each object of
an image appears once per group, its box corners moved by up to ``box_noise`` x half its width / height
and its label replaced by a random class with probability ``label_noise``. The content of such a query
is an embedding of its (noised) label, its reference the noised box. The criterion knows which object
each one came from (``index``), so it needs no matching: the decoder learns to pull a nearby box onto
the object and to name it from the first step, which Hungarian matching of the selected queries alone
teaches slowly while the matches still flip between steps.

Self-attention is masked so that no information leaks: the selected queries see only each other (at
inference there are no denoising queries), a denoising query sees the selected ones and the real queries
of its own group, not the other copies of its object.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torchvision.ops import box_convert


class DenoisingBatch(NamedTuple):
    content: torch.Tensor  # [B,K,D] label embeddings
    reference: torch.Tensor  # [B,K,4] noised boxes, cxcywh in [0, 1] of the input
    index: torch.Tensor  # [B,K] int64: the object of the image each query came from, -1 for padding
    attend: torch.Tensor  # [B,1,K+Q,K+Q] bool self-attention mask (True = may attend), denoising queries first


class DenoisingQueries(nn.Module):
    def __init__(self, num_classes: int, dim: int, max_queries: int, box_noise: float = 0.4,
                 label_noise: float = 0.2):
        """``max_queries``: denoising queries per image at most; groups = max_queries // (most objects in an image)."""
        super().__init__()
        if max_queries < 1:
            raise ValueError(f"max_queries must be >= 1, got {max_queries}")
        self.num_classes, self.max_queries = num_classes, max_queries
        self.box_noise, self.label_noise = box_noise, label_noise
        self.label_embed = nn.Embedding(num_classes + 1, dim)  # the last row: padding

    def forward(self, targets: list[dict], num_queries: int) -> DenoisingBatch | None:
        """``targets`` per image: labels [M_i], boxes [M_i,4] cxcywh in [0, 1] (an image without labels of
        the task: M_i = 0); ``num_queries``: the selected queries they join. None when no image has an object."""
        device = self.label_embed.weight.device
        sizes = [len(t["labels"]) for t in targets]
        most = max(sizes, default=0)
        if most == 0:
            return None
        groups = max(1, self.max_queries // most)
        batch, k = len(targets), groups * most
        labels = torch.full((batch, k), self.num_classes, dtype=torch.int64, device=device)
        boxes = torch.tensor([0.5, 0.5, 0.1, 0.1], device=device).repeat(batch, k, 1)
        index = torch.full((batch, k), -1, dtype=torch.int64, device=device)
        for b, (target, size) in enumerate(zip(targets, sizes)):
            if size == 0:
                continue
            slots = (torch.arange(groups, device=device)[:, None] * most
                     + torch.arange(size, device=device)[None]).flatten()  # (G * M_b,)
            labels[b, slots] = target["labels"].to(device).repeat(groups)
            boxes[b, slots] = target["boxes"].to(device, torch.float32).repeat(groups, 1)
            index[b, slots] = torch.arange(size, device=device).repeat(groups)
        real = index >= 0
        flip = (torch.rand(batch, k, device=device) < self.label_noise) & real
        labels = torch.where(flip, torch.randint(0, self.num_classes, (batch, k), device=device), labels)
        reference = torch.where(real[..., None], self.noised(boxes), boxes)
        group = torch.arange(k, device=device) // most
        total = k + num_queries
        attend = torch.zeros(batch, total, total, dtype=torch.bool, device=device)
        attend[:, :, k:] = True  # everyone sees the selected queries; they see nothing else
        attend[:, :k, :k] = (group[:, None] == group[None, :]) & real[:, None, :]
        attend[:, torch.arange(k), torch.arange(k)] = True  # a padding query sees at least itself
        return DenoisingBatch(self.label_embed(labels), reference, index, attend[:, None])

    def noised(self, boxes: torch.Tensor) -> torch.Tensor:
        """boxes [...,4] cxcywh -> each corner moved by up to box_noise x half the box's width / height."""
        xyxy = box_convert(boxes, "cxcywh", "xyxy")
        half = torch.cat([boxes[..., 2:], boxes[..., 2:]], -1) / 2  # (w, h, w, h) / 2
        xyxy = xyxy + (torch.rand_like(xyxy) * 2 - 1) * self.box_noise * half
        xyxy = xyxy.clamp(0.0, 1.0)
        low = torch.minimum(xyxy[..., :2], xyxy[..., 2:])
        high = torch.maximum(xyxy[..., :2], xyxy[..., 2:])
        noised = box_convert(torch.cat([low, high], -1), "xyxy", "cxcywh")
        return torch.cat([noised[..., :2], noised[..., 2:].clamp(min=1e-3)], -1)
