"""Transformer layers shared by the DETR-style heads and the trajectory forecaster."""

from __future__ import annotations

import torch
from torch import nn

from perception.models.attention import MultiHeadAttention
from perception.models.deformable_attention import DeformableCrossAttention


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU -> Linear."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """Self-attention over the tokens, FFN; residual + post-LayerNorm (Vaswani et al. 2017).

    ``pos`` is added to queries and keys only; ``mask`` (bool, True = may attend, broadcastable
    to [B, heads, N, N]) hides padded tokens.
    """

    def __init__(self, dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(dim, num_heads, dropout)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B,N,D] -> [B,N,D]."""
        q = tokens if pos is None else tokens + pos
        tokens = self.norm1(tokens + self.dropout(self.self_attn(q, q, tokens, mask)))
        return self.norm2(tokens + self.dropout(self.ffn(tokens)))


class DecoderLayer(nn.Module):
    """Self-attention among queries, cross-attention to memory, FFN; residual + post-LayerNorm.

    Positions are added to queries and keys (not values), as in DETR. ``self_mask`` makes the
    self-attention causal for sequence decoding; ``memory_mask`` hides padded memory tokens. ``long_memory``: few
    queries reading thousands of memory tokens (``MultiHeadAttention``).
    """

    def __init__(self, dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0, long_memory: bool = False):
        super().__init__()
        self.self_attn = MultiHeadAttention(dim, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(dim, num_heads, dropout, long_memory=long_memory)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: torch.Tensor, memory: torch.Tensor, query_pos: torch.Tensor | None = None,
                memory_pos: torch.Tensor | None = None, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, self_context: torch.Tensor | None = None) -> torch.Tensor:
        """queries [B,Q,D], memory [B,N,D] (positions alike) -> [B,Q,D].

        ``self_context`` [B,L,D] (incremental decoding): self-attention keys/values are this
        layer's inputs so far, ending with ``queries``; with a causal decoder the new rows then
        equal the full computation's last rows, so earlier steps need not be recomputed.
        """
        q = queries if query_pos is None else queries + query_pos
        if self_context is None:
            attended = self.self_attn(q, q, queries, self_mask)
        else:
            attended = self.self_attn(q, self_context, self_context, self_mask)
        queries = self.norm1(queries + self.dropout(attended))
        q = queries if query_pos is None else queries + query_pos
        k = memory if memory_pos is None else memory + memory_pos
        queries = self.norm2(queries + self.dropout(self.cross_attn(q, k, memory, memory_mask)))
        return self.norm3(queries + self.dropout(self.ffn(queries)))


class DeformableDecoderLayer(nn.Module):
    """``DecoderLayer`` with multi-scale deformable cross-attention: self-attention among queries, then each
    query reads a few points per head and level around its reference box, FFN; residual + post-LayerNorm."""

    def __init__(self, dim: int, num_heads: int, ffn_dim: int, num_levels: int, num_points: int = 4,
                 dropout: float = 0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(dim, num_heads, dropout)
        self.cross_attn = DeformableCrossAttention(dim, num_heads, num_levels, num_points)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: torch.Tensor, memory: torch.Tensor, query_pos: torch.Tensor,
                reference: torch.Tensor, level_shapes: list[tuple[int, int]],
                self_mask: torch.Tensor | None = None) -> torch.Tensor:
        """queries [B,Q,D], memory [B,N,D] (no positions: the reference says where), query_pos [B,Q,D],
        reference [B,Q,4] cxcywh in [0, 1], self_mask [B,1,Q,Q] or [Q,Q] (True = may attend) -> [B,Q,D]."""
        q = queries + query_pos
        queries = self.norm1(queries + self.dropout(self.self_attn(q, q, queries, self_mask)))
        attended = self.cross_attn(queries + query_pos, reference, memory, level_shapes)
        queries = self.norm2(queries + self.dropout(attended))
        return self.norm3(queries + self.dropout(self.ffn(queries)))
