"""Sinusoidal position encodings: 1D (sequences), 2D (feature maps) and for boxes (query positions)."""

from __future__ import annotations

import math

import torch

# Normalised coordinates in [0, 1] are scaled by this before the geometric frequencies
# 1 ... 1/temperature: the fastest channel then turns ~63 rad across the image, resolving a
# few pixels at stride 8; the slowest stay monotonic across it.
NORMALISED_SCALE = 20 * math.pi


def sine_encoding(positions: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """positions [...] (float) -> [..., dim] in positions' dtype: interleaved sin/cos at geometric frequencies.

    Computed in float32 whatever the input (angles reach ~63 rad, too coarse in fp16), then cast back
    so a half-precision model stays half precision."""
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    frequencies = temperature ** (torch.arange(dim // 2, device=positions.device, dtype=torch.float32) * 2 / dim)
    angles = positions.float()[..., None] / frequencies
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).to(positions.dtype)


def sine_encoding_2d(height: int, width: int, dim: int, device=None) -> torch.Tensor:
    """[H*W, dim] for a feature map (row-major): half the channels encode y, half x, from
    pixel-centre coordinates normalised to [0, 1] so the encoding is resolution independent."""
    y = (torch.arange(height, device=device, dtype=torch.float32) + 0.5) / height
    x = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) / width
    yy, xx = torch.meshgrid(y, x, indexing="ij")
    return torch.cat([sine_encoding(yy.flatten() * NORMALISED_SCALE, dim // 2),
                      sine_encoding(xx.flatten() * NORMALISED_SCALE, dim // 2)], dim=-1)


def box_sine_encoding(boxes_cxcywh: torch.Tensor, dim: int) -> torch.Tensor:
    """Normalised boxes [..., 4] -> [..., dim] (DAB-DETR style query positions); dim % 8 == 0."""
    return torch.cat([sine_encoding(boxes_cxcywh[..., i] * NORMALISED_SCALE, dim // 4) for i in range(4)], dim=-1)
