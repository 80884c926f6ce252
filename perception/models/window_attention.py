"""Swin's window attention written per head for the exported graph: the same numbers as timm's, fewer copies.

timm computes q, k and v of all heads in one matmul, then reshapes (windows, N, 3, heads, d) and permutes to
(3, windows, heads, N, d), and after attention transposes (windows, heads, N, d) back to (windows, N, C). In
ONNX that is a Split and three Transposes over every token of the stage: memory-bound passes that ONNX
Runtime runs at the machine's copy speed (stride 4 at 384x640: 15,360 tokens). Per head, q, k and v come
from their own rows of the qkv weight, so each is a (windows, N, d) matmul output with no copy; the heads'
outputs are concatenated once before the projection.

Measured on the deployment graph (ONNX Runtime, 2 threads, batch 1, Intel Xeon, 2026-12-05): per head up
to 8 heads, timm's batched form at 16, 97.9 ms against 102.5 (each graph in its own processes); per head at
16 heads too was slower (16 small matmul chains cost more than the transposes they save). Training and eager
inference keep timm's forward (PyTorch's fused attention kernel); only ``torch.onnx.export`` sees this one. The INT8
(Q/DQ) export quantizes a batched graph instead (``exported_window_attention``).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from timm.models.swin_transformer import WindowAttention

WINDOW_ATTENTION_LAYOUTS = ("per_head", "batched")  # model.backbone.onnx_window_attention
PER_HEAD_MAX_HEADS = 8  # above this, timm's batched form exports faster (see the module docstring)


def per_head_window_attention(attn: WindowAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """timm ``WindowAttention.forward`` (eval), head by head.

    x [B*nW, N, C] tokens of each window (N = window area); mask [nW, N, N] additive (shifted windows) or None.
    Returns [B*nW, N, C].
    """
    windows, tokens, channels = x.shape
    heads = attn.num_heads
    head_dim = channels // heads
    weight, bias = attn.qkv.weight, attn.qkv.bias  # (3C, C), (3C,): rows q of every head, then k, then v
    position_bias = attn._get_rel_pos_bias()  # (1, heads, N, N)
    outputs = []
    for h in range(heads):
        q_rows = slice(h * head_dim, (h + 1) * head_dim)
        k_rows = slice(channels + h * head_dim, channels + (h + 1) * head_dim)
        v_rows = slice(2 * channels + h * head_dim, 2 * channels + (h + 1) * head_dim)
        q = F.linear(x, weight[q_rows] * attn.scale, bias[q_rows] * attn.scale)  # (B*nW, N, d), pre-scaled
        k = F.linear(x, weight[k_rows], bias[k_rows])
        v = F.linear(x, weight[v_rows], bias[v_rows])
        scores = q @ k.transpose(-2, -1) + position_bias[0, h]  # (B*nW, N, N)
        if mask is not None:
            num_windows = mask.shape[0]
            scores = (scores.view(-1, num_windows, tokens, tokens) + mask.unsqueeze(0)).view(-1, tokens, tokens)
        outputs.append(scores.softmax(-1) @ v)
    return attn.proj(torch.cat(outputs, dim=-1))


class ExportableWindowAttention(WindowAttention):
    """timm's ``WindowAttention`` (same parameters and state dict) that exports per head when it has at most
    ``PER_HEAD_MAX_HEADS`` heads."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export() and self.num_heads <= PER_HEAD_MAX_HEADS:
            return per_head_window_attention(self, x, mask)
        return super().forward(x, mask)


def export_window_attention(model: torch.nn.Module, layout: str) -> None:
    """Give every window attention of ``model`` (a timm Swin, or a network holding one) the exported ``layout``:
    "per_head" (``ExportableWindowAttention``) or "batched" (timm's class). Parameters and training are unchanged."""
    if layout not in WINDOW_ATTENTION_LAYOUTS:
        raise ValueError(f"model.backbone.onnx_window_attention {layout!r} is not one of {WINDOW_ATTENTION_LAYOUTS}")
    target = ExportableWindowAttention if layout == "per_head" else WindowAttention
    for module in model.modules():
        if isinstance(module, WindowAttention):
            module.__class__ = target


@contextlib.contextmanager
def exported_window_attention(model: torch.nn.Module, layout: str):
    """Within the block, every window attention of ``model`` exports in ``layout``; the model is restored after.

    The INT8 export quantizes a "batched" graph: per head, the demo checkpoint's light AP50 moved by +0.08 between
    the fp32 graph and its Q/DQ copy, against -0.006 batched (README, INT8)."""
    classes = [(module, type(module)) for module in model.modules() if isinstance(module, WindowAttention)]
    try:
        export_window_attention(model, layout)
        yield
    finally:
        for module, cls in classes:
            module.__class__ = cls
