"""Swin's window attention exported per head: timm's numbers, fewer copies in the graph; window sizes as pairs."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from timm.models.swin_transformer import WindowAttention

from perception.models.backbone import SwinBackbone
from perception.models.window_attention import (
    PER_HEAD_MAX_HEADS,
    ExportableWindowAttention,
    per_head_window_attention,
)

TINY_ARCH = dict(embed_dim=32, depths=(1, 2, 1, 1), num_heads=(1, 2, 4, 8))


@pytest.mark.parametrize("shifted", [False, True])
def test_per_head_attention_equals_timms(shifted):
    torch.manual_seed(0)
    attention = WindowAttention(32, num_heads=4, window_size=(6, 10)).eval()
    with torch.no_grad():
        attention.relative_position_bias_table.normal_()
    windows, tokens = 6, 60
    x = torch.randn(2 * windows, tokens, 32)
    # A shifted block's mask: 0 inside a region, a large negative across regions, one (nW, N, N) per window.
    mask = torch.where(torch.rand(windows, tokens, tokens) < 0.3, -1000.0, 0.0) if shifted else None
    with torch.no_grad():
        torch.testing.assert_close(per_head_window_attention(attention, x, mask), attention(x, mask),
                                   atol=1e-5, rtol=1e-5)


def _export(backbone: SwinBackbone, images: torch.Tensor) -> bytes:
    class Features(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = backbone

        def forward(self, x):
            return tuple(self.backbone(x))

    buffer = io.BytesIO()
    torch.onnx.export(Features(), (images,), buffer, input_names=["images"], opset_version=17, dynamo=False)
    return buffer.getvalue()


def test_backbone_exports_per_head_with_the_same_features_and_no_head_transposes():
    """Both layouts export the same features as eager PyTorch (ONNX Runtime). In the per-head graph the only
    transposes inside the attention blocks are each head's key, (B*nW, N, d) -> (B*nW, d, N), which ONNX Runtime and
    TensorRT fold into the matmul; timm's batched graph permutes q/k/v (5-D) and the heads' outputs (4-D)."""
    torch.manual_seed(0)
    images = torch.randn(1, 3, 96, 160)
    for layout in ("per_head", "batched"):
        torch.manual_seed(0)
        backbone = SwinBackbone("swin_tiny_patch4_window7_224", (96, 160), window_size=[6, 10],
                                onnx_window_attention=layout, **TINY_ARCH).eval()
        with torch.no_grad():
            expected = backbone(images)
        graph = _export(backbone, images)
        session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
        for out, ref in zip(session.run(None, {"images": images.numpy()}), expected):
            np.testing.assert_allclose(out, ref.numpy(), atol=1e-4, rtol=1e-4)
        model = onnx.shape_inference.infer_shapes(onnx.load_from_string(graph))
        ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in model.graph.value_info}
        # Transposes of activations inside the attention (rank >= 3; 2-D ones are weights, folded to constants).
        in_attention = [ranks.get(n.output[0]) for n in model.graph.node
                        if n.op_type == "Transpose" and "/attn/" in n.name and ranks.get(n.output[0], 0) >= 3]
        assert in_attention, layout
        if layout == "per_head":
            assert set(in_attention) == {3}, in_attention
        else:
            assert 5 in in_attention and 4 in in_attention, in_attention
    assert max(TINY_ARCH["num_heads"]) <= PER_HEAD_MAX_HEADS  # every stage of TINY_ARCH is exported per head


def test_layouts_share_parameters_and_training_forward():
    torch.manual_seed(0)
    per_head = SwinBackbone("swin_tiny_patch4_window7_224", (96, 160), onnx_window_attention="per_head", **TINY_ARCH)
    torch.manual_seed(0)
    batched = SwinBackbone("swin_tiny_patch4_window7_224", (96, 160), onnx_window_attention="batched", **TINY_ARCH)
    assert per_head.state_dict().keys() == batched.state_dict().keys()
    kinds = {type(m) for m in per_head.modules() if isinstance(m, WindowAttention)}
    assert kinds == {ExportableWindowAttention}
    assert {type(m) for m in batched.modules() if isinstance(m, WindowAttention)} == {WindowAttention}
    images = torch.randn(2, 3, 96, 160)
    for a, b in zip(per_head.eval()(images), batched.eval()(images)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("window", [[0, 4], [1, 2, 3], "7", 2.5])
def test_window_size_must_be_a_positive_int_or_pair(window):
    with pytest.raises(ValueError, match="window_size"):
        SwinBackbone("swin_tiny_patch4_window7_224", (96, 160), window_size=window, **TINY_ARCH)


def test_unknown_layout_is_an_error():
    with pytest.raises(ValueError, match="onnx_window_attention"):
        SwinBackbone("swin_tiny_patch4_window7_224", (96, 160), onnx_window_attention="fused", **TINY_ARCH)
