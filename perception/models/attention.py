"""Multi-head attention (the one attention implementation in the package).

The exported graph gets the attention written from its parts: explicit matmul -> softmax -> matmul,
no fused kernels or data-dependent shapes, which every TensorRT version parses. Masks are additive
with a finite large negative (not -inf) so FP16 engines do not produce NaNs.

Training and eager inference without a bool mask (the DETR heads) call PyTorch's fused
``F.scaled_dot_product_attention``: the same function (equal within float rounding, tests/test_attention.py) at
2-6x the speed forward + backward on the CPU for the heads' cross-attention to thousands of memory
tokens (no [Lq, Lk] weights kept for the backward; bench/train_step_rate.py), and flash / memory-
efficient kernels on a GPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MASK_VALUE = -1e4  # finite: -inf turns into NaN in FP16 softmax when a row is fully masked


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + mask) V.

    query [..., Lq, d_k], key [..., Lk, d_k], value [..., Lk, d_v]; mask broadcastable to
    [..., Lq, Lk], either bool (True = may attend) or additive float.
    Returns (output [..., Lq, d_v], weights [..., Lq, Lk]).
    """
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, MASK_VALUE)
        else:
            scores = scores + mask
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """``scaled_dot_product_attention``'s output: the explicit formula while exporting to ONNX and with a
    bool mask (masked scores are *replaced* by the finite negative, so a fully masked row attends
    uniformly), PyTorch's fused kernel otherwise (no mask or an additive float one)."""
    if torch.onnx.is_in_onnx_export() or (mask is not None and mask.dtype == torch.bool):
        return scaled_dot_product_attention(query, key, value, mask)[0]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


def causal_mask(length: int, device=None) -> torch.Tensor:
    """bool [L, L]: position i may attend to positions <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class MultiHeadAttention(nn.Module):
    """Project to ``num_heads`` heads, attend per head, concatenate, project back."""

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.num_heads, dim // self.num_heads).transpose(1, 2)  # (B, h, L, d)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """query [B,Lq,D], key/value [B,Lk,D]; mask [Lq,Lk] or [B,1,Lq,Lk] -> [B,Lq,D]."""
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(key)), self._split(self.v_proj(value))
        out = attend(q, k, v, mask)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, -1)  # (B, Lq, D)
        return self.out_proj(self.dropout(out))
