"""Pieces shared by the DETR-style heads: the flattened multi-scale memory and small MLPs.

Memory: chosen FPN levels projected to ``dim`` channels and flattened into tokens, with 2D sine
positions plus a learned level embedding, and one anchor box per token (its cell centre, a size
that doubles per level). Query selection (RT-DETR style) scores every token and starts the
decoder from the top-k; the anchors give those queries their initial geometry.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from perception.core.checkpoint import declare_pruned_state
from perception.models.position_encoding import sine_encoding_2d

FOCAL_PRIOR = 0.01  # initial class probability (focal-loss practice: the loss starts small)


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(eps, 1 - eps)
    return torch.log(x / (1 - x))


def init_focal_bias(linear: nn.Linear) -> None:
    nn.init.constant_(linear.bias, -math.log((1 - FOCAL_PRIOR) / FOCAL_PRIOR))


def zero_last_layer(mlp: MLP) -> None:
    """The MLP starts as a zero offset: refinements begin at their reference."""
    nn.init.zeros_(mlp.layers[-1].weight)
    nn.init.zeros_(mlp.layers[-1].bias)


class MLP(nn.Module):
    def __init__(self, dim_in: int, hidden: int, dim_out: int, layers: int):
        super().__init__()
        dims = [dim_in] + [hidden] * (layers - 1) + [dim_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class ConvTower(nn.Module):
    """Residual 3x3 conv blocks shared by every level (FCOS-style tower): per-token context for the
    dense proposals, which a 1x1 projection of a narrow FPN level lacks."""

    def __init__(self, dim: int, num_convs: int):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.GroupNorm(min(32, dim // 4), dim), nn.ReLU())
            for _ in range(num_convs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


class TokenMemory(nn.Module):
    """FPN levels -> (tokens [B,N,D], positions [1,N,D] or None, anchors [1,N,4] cxcywh normalised,
    finest projected level [B,D,H,W], the map ``ReferenceSampler`` reads).

    ``num_convs`` residual 3x3 conv blocks (shared by the levels) run on each projected level.
    ``positions``: whether the reader needs the tokens' positional encodings (dense cross-attention adds them
    to its keys). Deformable cross-attention reads at its reference boxes and never used them; without this
    switch their level embedding was a weight no loss reached, which stops DDP at the first step.
    """

    def __init__(self, in_channels: int, dim: int, levels: tuple[int, ...], num_convs: int = 0,
                 positions: bool = True):
        super().__init__()
        self.levels = tuple(levels)
        self.dim = dim
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(in_channels, dim, 1), nn.GroupNorm(min(32, dim // 4), dim)) for _ in self.levels)
        self.tower = ConvTower(dim, num_convs)
        level_embed = nn.init.normal_(torch.zeros(len(self.levels), dim), std=0.02)
        # Drawn either way, so the weights initialised after it are those of earlier versions (seeded runs
        # reproduce); checkpoints written before the switch still hold it (dropped on load).
        self.level_embed = nn.Parameter(level_embed) if positions else None
        declare_pruned_state(self, () if positions else ("level_embed",))

    def forward(self, levels: list[torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
        tokens, positions, anchors, maps = [], [], [], []
        for i, (level_index, proj) in enumerate(zip(self.levels, self.input_proj)):
            x = self.tower(proj(levels[level_index]))  # (B, D, H, W)
            maps.append(x)
            _, _, height, width = x.shape
            tokens.append(x.flatten(2).transpose(1, 2))  # (B, H*W, D)
            if self.level_embed is not None:
                positions.append(sine_encoding_2d(height, width, self.dim, x.device) + self.level_embed[i])
            ys = (torch.arange(height, device=x.device, dtype=torch.float32) + 0.5) / height
            xs = (torch.arange(width, device=x.device, dtype=torch.float32) + 0.5) / width
            cy, cx = torch.meshgrid(ys, xs, indexing="ij")
            size = torch.full_like(cx, 0.05 * 2.0 ** i)
            anchors.append(torch.stack([cx, cy, size, size], dim=-1).reshape(-1, 4))
        # Positions and anchors are built in float32; cast to the tokens' dtype for fp16 / bf16 models.
        dtype = tokens[0].dtype
        position = torch.cat(positions, 0)[None].to(dtype) if positions else None
        return torch.cat(tokens, 1), position, torch.cat(anchors, 0)[None].to(dtype), maps[0]


class ReferenceSampler(nn.Module):
    """Features read at fixed points of each query's reference, added to the query before a decoder layer.

    Plain cross-attention must learn where to look from the positional encodings alone, which takes
    far more steps than our budgets give (measured: the lane head's predictions stayed image-blind).
    Reading the finest memory level at the reference itself (the idea of Deformable DETR's sampling
    points and CLRNet's ROIGather, without learned offsets) hands each query its own pixels from the
    first step. Bilinear ``grid_sample`` exports as ONNX GridSample (opset 16+), which TensorRT runs natively.
    """

    def __init__(self, dim: int, num_points: int):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(dim * num_points, dim), nn.LayerNorm(dim))

    def forward(self, feature_map: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """feature_map [B,D,H,W], points [B,Q,K,2] (x, y) in [0, 1] of the input -> [B,Q,D]."""
        grid = points.to(feature_map.dtype) * 2 - 1
        sampled = F.grid_sample(feature_map, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return self.proj(sampled.permute(0, 2, 3, 1).flatten(2))  # (B, D, Q, K) -> (B, Q, K*D) -> (B, Q, D)


# Where a box query reads the image: a 3x3 grid over the middle half of its box (cxcywh offsets).
BOX_SAMPLE_OFFSETS = torch.tensor([(dx, dy) for dy in (-0.25, 0.0, 0.25) for dx in (-0.25, 0.0, 0.25)])


def box_sample_points(boxes: torch.Tensor, offsets: torch.Tensor = BOX_SAMPLE_OFFSETS) -> torch.Tensor:
    """boxes [B,Q,4] cxcywh in [0, 1] -> points [B,Q,9,2] (x, y) in [0, 1]. ``offsets`` [9,2]: pass a copy on
    the boxes' device (a module buffer): a host-to-device copy inside the forward breaks CUDA-graph capture."""
    offsets = offsets.to(boxes.device, boxes.dtype)  # (9, 2)
    return boxes[..., None, :2] + offsets * boxes[..., None, 2:]


def select_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [B,k] of the highest-scoring tokens; ``scores`` [B,N,C] are class logits."""
    # int(): the token count is fixed by the input size, so an exported graph gets a constant K
    # (TensorRT needs TopK's K as an initializer) even with a dynamic batch axis.
    return scores.max(dim=-1).values.topk(min(k, int(scores.shape[1])), dim=1).indices


def gather_tokens(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """values [B,N,F], indices [B,K] -> [B,K,F]."""
    return values.gather(1, indices[..., None].expand(-1, -1, values.shape[-1]))
