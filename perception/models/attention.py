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

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, long_memory: bool = False):
        """``long_memory``: a cross-attention of few queries to many tokens with static shapes (the camera heads); the
        exported graph then projects the queries instead of the memory (``_attend_unprojected_memory``)."""
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.long_memory = long_memory
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
        if (self.long_memory and torch.onnx.is_in_onnx_export() and mask is None
                and query.shape[1] * (self.num_heads - 1) <= query.shape[2]):  # FLOPs no higher than projecting
            return self.out_proj(self._attend_unprojected_memory(query, key, value))
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(key)), self._split(self.v_proj(value))
        out = attend(q, k, v, mask)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, -1)  # (B, Lq, D)
        return self.out_proj(self.dropout(out))

    def _attend_unprojected_memory(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The heads' concatenated attention output [B,Lq,D] (before out_proj), with the key and value projections
        moved to the query side: the same numbers as projecting the memory, written for the exported graph.

        Per head h (rows W_h of a projection): q_h . (W_k,h k + b_k,h) = (W_k,h^T q_h) . k + q_h . b_k,h, and the last
        term is the same for every key, so the softmax drops it; the weights sum to 1, so
        sum_j a_j (W_v,h v_j + b_v,h) = W_v,h (sum_j a_j v_j) + b_v,h. A few queries reading thousands of memory
        tokens (the lane head: 30 queries, 5040 tokens) then never write the projected keys and values, nor
        transpose them into heads; the FLOPs are no higher while queries x (heads - 1) <= D (the caller's test).
        """
        batch, length, _ = query.shape
        heads, dim = self.num_heads, self.q_proj.out_features  # Python ints, constants in the graph
        head_dim = dim // heads
        q = self._split(self.q_proj(query))  # (B, h, Lq, d)
        key_weight = self.k_proj.weight.view(heads, head_dim, dim)  # (h, d, D): the rows of each head
        q_memory = q @ key_weight / math.sqrt(head_dim)  # (B, h, Lq, D): each head's query in memory channels
        weights = (q_memory @ key.transpose(1, 2)[:, None]).softmax(dim=-1)  # (B, h, Lq, Lk)
        context = weights @ value[:, None]  # (B, h, Lq, D): attention-weighted memory, before the value projection
        value_weight = self.v_proj.weight.view(heads, head_dim, dim).transpose(1, 2)  # (h, D, d)
        out = context @ value_weight + self.v_proj.bias.view(heads, 1, head_dim)  # (B, h, Lq, d)
        return out.transpose(1, 2).reshape(batch, length, dim)
