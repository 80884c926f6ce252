"""The attention primitive and the transformer layers built on it."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import torch

from perception.models.attention import (
    MultiHeadAttention,
    attend,
    causal_mask,
    scaled_dot_product_attention,
)
from perception.models.transformer import DecoderLayer


def test_scaled_dot_product_worked_example():
    # Two keys with raw scores 112 and 96, d_k = 64 so the scale is sqrt(64) = 8: softmax([14, 12]).
    query = torch.zeros(1, 64)
    query[0, 0] = 112.0
    key = torch.zeros(2, 64)
    key[0, 0], key[1, 0] = 1.0, 96.0 / 112.0
    value = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    out, weights = scaled_dot_product_attention(query, key, value)
    assert torch.allclose(weights, torch.tensor([[0.8808, 0.1192]]), atol=1e-4)
    assert torch.allclose(out, weights)


def test_masks_are_finite_and_causal():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    out = attention(x, x, x, causal_mask(5))
    changed = x.clone()
    changed[:, 3:] += 10.0
    out_changed = attention(changed, changed, changed, causal_mask(5))
    assert torch.allclose(out[:, :3], out_changed[:, :3], atol=1e-6)  # later inputs do not leak backwards
    assert not torch.allclose(out[:, 3:], out_changed[:, 3:])
    fully_masked = attention(x, x, x, torch.zeros(5, 5, dtype=torch.bool))
    assert torch.isfinite(fully_masked).all()


def test_decoder_layer_is_permutation_equivariant_over_queries():
    torch.manual_seed(0)
    layer = DecoderLayer(32, 4, 64).eval()
    queries, memory = torch.randn(1, 6, 32), torch.randn(1, 20, 32)
    permutation = torch.randperm(6)
    assert torch.allclose(layer(queries, memory)[:, permutation], layer(queries[:, permutation], memory), atol=1e-5)


def test_fused_path_equals_the_exported_formula():
    """Training uses PyTorch's fused kernel, the export the explicit formula: same outputs and gradients,
    without a mask and with an additive one; bool masks keep the explicit formula (fully masked rows)."""
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, n, 8, dtype=torch.float64, requires_grad=True) for n in (5, 7, 7))
    for mask in (None, torch.randn(2, 1, 5, 7, dtype=torch.float64)):
        explicit, _ = scaled_dot_product_attention(query, key, value, mask)
        fused = attend(query, key, value, mask)  # not exporting, no bool mask: the fused kernel
        torch.testing.assert_close(fused, explicit)
        grads = torch.autograd.grad(explicit.sum(), (query, key, value))
        fused_grads = torch.autograd.grad(fused.sum(), (query, key, value))
        for a, b in zip(grads, fused_grads):
            torch.testing.assert_close(a, b)
    attention = MultiHeadAttention(16, 4).eval()
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        fused_out = attention(x, x, x)
        q, k, v = (attention._split(proj(x)) for proj in (attention.q_proj, attention.k_proj, attention.v_proj))
        explicit_out = attention.out_proj(scaled_dot_product_attention(q, k, v)[0].transpose(1, 2).reshape(1, 5, 16))
    torch.testing.assert_close(fused_out, explicit_out)


def test_exported_cross_attention_projects_the_queries_not_the_memory():
    """Few queries over a long memory export with the key and value projections moved to the query side: the same
    outputs as projecting the memory (non-zero biases included), and ONNX Runtime agrees with eager PyTorch."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, long_memory=True).eval()
    with torch.no_grad():
        for proj in (attention.k_proj, attention.v_proj):
            proj.bias.normal_()
    query, memory = torch.randn(2, 3, 16), torch.randn(2, 40, 16)
    key = memory + torch.randn(2, 40, 16)  # the decoder's keys carry positions, its values do not
    with torch.no_grad():
        projected = attention(query, key, memory)  # eager: the memory is projected
        moved = attention.out_proj(attention._attend_unprojected_memory(query, key, memory))
    torch.testing.assert_close(moved, projected, atol=1e-5, rtol=1e-5)

    class CrossAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = attention

        def forward(self, q, k, v):
            return self.attention(q, k, v)

    buffer = io.BytesIO()
    torch.onnx.export(CrossAttention(), (query, key, memory), buffer, input_names=["q", "k", "v"], opset_version=17,
                      dynamo=False)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    (onnx_out,) = session.run(None, {"q": query.numpy(), "k": key.numpy(), "v": memory.numpy()})
    np.testing.assert_allclose(onnx_out, projected.numpy(), atol=1e-5, rtol=1e-5)
    assert not _memory_projections(buffer.getvalue(), memory_length=40, dim=16)
    attention.long_memory = False  # the same export with the memory projected: the check sees its projections
    buffer = io.BytesIO()
    torch.onnx.export(CrossAttention(), (query, key, memory), buffer, input_names=["q", "k", "v"], opset_version=17,
                      dynamo=False)
    assert len(_memory_projections(buffer.getvalue(), memory_length=40, dim=16)) == 2


def _memory_projections(graph_bytes: bytes, memory_length: int, dim: int) -> list[str]:
    """MatMul / Gemm nodes of an ONNX graph whose output is a (B, memory_length, dim) projection of the memory."""
    model = onnx.shape_inference.infer_shapes(onnx.load_from_string(graph_bytes))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    return [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm")
            and shapes.get(n.output[0], [])[-2:] == [memory_length, dim]]
