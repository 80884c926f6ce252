"""Multi-scale deformable cross-attention (Deformable DETR, Zhu et al. 2021), in plain PyTorch ops.

Dense cross-attention lets every query weigh every memory token (thousands at stride 8-32) and must
learn where to look from positional encodings alone. Deformable attention reads, per head and per
memory level, a few points (``num_points``) placed around the query's reference box by learned
offsets, and mixes them with learned weights (a softmax over levels x points). Why here:

- convergence: the reference box tells each query where to look from the first step (Deformable DETR
  reached DETR's AP in a tenth of the epochs);
- cost: no key projection and no [Q, N] score matrix over the memory, only the value projection of
  the tokens and Q x heads x levels x points bilinear reads; deployment's cross-attention to 5040
  tokens per layer was most of the heads' time (README, benchmarks).

Bilinear ``grid_sample`` per level exports as ONNX GridSample (opset 16+), which TensorRT 8.6+ runs
natively: no custom plugin, unlike the CUDA kernel of the reference implementation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class DeformableCrossAttention(nn.Module):
    """queries [B,Q,D] read ``num_points`` points per head and level around their reference boxes."""

    def __init__(self, dim: int, num_heads: int, num_levels: int, num_points: int = 4):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads, self.num_levels, self.num_points = num_heads, num_levels, num_points
        self.value_proj = nn.Linear(dim, dim)
        self.sampling_offsets = nn.Linear(dim, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(dim, num_heads * num_levels * num_points)
        self.output_proj = nn.Linear(dim, dim)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Deformable DETR's start: head h looks along direction 2 pi h / heads, point k at distance k + 1,
        # every level alike; uniform weights. The offsets then move from there with the query.
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.num_heads, dtype=torch.float32) * (2 * math.pi / self.num_heads)
        directions = torch.stack([angles.cos(), angles.sin()], -1)
        directions = directions / directions.abs().max(-1, keepdim=True).values  # (heads, 2) on the unit square
        grid = directions[:, None, None, :].repeat(1, self.num_levels, self.num_points, 1)
        grid = grid * torch.arange(1, self.num_points + 1, dtype=torch.float32)[None, None, :, None]
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        nn.init.xavier_uniform_(self.value_proj.weight)
        nn.init.zeros_(self.value_proj.bias)
        nn.init.xavier_uniform_(self.output_proj.weight)
        nn.init.zeros_(self.output_proj.bias)

    def forward(self, queries: torch.Tensor, reference: torch.Tensor, memory: torch.Tensor,
                level_shapes: list[tuple[int, int]]) -> torch.Tensor:
        """queries [B,Q,D] (positions already added); reference [B,Q,4] boxes cxcywh in [0, 1] of the input;
        memory [B,N,D]: the levels' tokens flattened row-major and concatenated in ``level_shapes`` order
        ((h, w) per level, N = sum h*w). Returns [B,Q,D]."""
        batch, num_queries, dim = queries.shape
        heads, levels, points = self.num_heads, self.num_levels, self.num_points
        head_dim = dim // heads
        if torch.onnx.is_in_onnx_export():
            # Written channel-first, (D, D) @ (B, D, N): each level's slice then reshapes to grid_sample's
            # (B*heads, d, h, w) with no transpose of the projected tokens (ONNX Runtime: about 1 ms less per
            # graph, README benchmarks). Eagerly, the transposed view below costs the same and trains as before.
            value = self.value_proj.weight @ memory.transpose(1, 2) + self.value_proj.bias[:, None]  # (B, D, N)
        else:
            value = self.value_proj(memory).transpose(1, 2)  # (B, D, N), a view
        offsets = self.sampling_offsets(queries).view(batch, num_queries, heads, levels, points, 2)
        weights = self.attention_weights(queries).view(batch, num_queries, heads, levels * points).softmax(-1)
        # Offsets are in units of half the reference box per point step (Deformable DETR's box form).
        centre = reference[:, :, None, None, None, :2]
        extent = reference[:, :, None, None, None, 2:]
        locations = centre + offsets / points * extent * 0.5  # (B, Q, heads, levels, points, 2) x, y in [0, 1]
        grids = (locations * 2 - 1).permute(0, 2, 3, 1, 4, 5)  # (B, heads, levels, Q, points, 2)
        # split, not slices: the backward of a split concatenates the levels' gradients, where each slice's backward
        # would fill a zero tensor of all N tokens and add it up (about 7 ms per layer at the demo's batch of 8)
        level_values = value.split([height * width for height, width in level_shapes], dim=-1)
        sampled = []
        for level, ((height, width), level_value) in enumerate(zip(level_shapes, level_values)):
            level_value = level_value.reshape(batch * heads, head_dim, height, width)
            grid = grids[:, :, level].reshape(batch * heads, num_queries, points, 2)
            sampled.append(F.grid_sample(level_value, grid.to(level_value.dtype), mode="bilinear",
                                         padding_mode="zeros", align_corners=False))  # (B*heads, d, Q, points)
        sampled = torch.cat(sampled, dim=-1)  # (B*heads, d, Q, levels*points)
        weights = weights.permute(0, 2, 1, 3).reshape(batch * heads, 1, num_queries, levels * points)
        out = (sampled * weights.to(sampled.dtype)).sum(-1)  # (B*heads, d, Q)
        out = out.view(batch, dim, num_queries).transpose(1, 2)  # (B, Q, D), heads concatenated
        return self.output_proj(out)
