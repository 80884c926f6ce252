"""FLOPs counted in an ONNX graph agree with torch's counter on the same network, layer type by layer type."""

from __future__ import annotations

import io

import onnx
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from perception.export.graph_flops import graph_flops


class EveryCountedLayer(nn.Module):
    """A grouped strided convolution, a transposed convolution, a linear layer on a 3-D input (MatMul), one on a
    2-D input (Gemm) and a batched activation x activation matmul (attention's product)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(16, 4, 2, stride=2)
        self.token_proj = nn.Linear(4, 12)
        self.pooled_proj = nn.Linear(12, 5)

    def forward(self, x):  # x: (B, 8, H, W)
        x = self.up(torch.relu(self.conv(x)))  # (B, 4, H, W)
        tokens = self.token_proj(x.flatten(2).transpose(1, 2))  # (B, H*W, 12)
        affinity = tokens @ tokens.transpose(1, 2)  # (B, H*W, H*W)
        mixed = affinity.softmax(-1) @ tokens  # (B, H*W, 12)
        return self.pooled_proj(mixed.mean(1))  # (B, 5)


def _export(model: nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, input_names=["x"], opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue())


def test_graph_count_equals_torch_counter():
    model, x = EveryCountedLayer().eval(), torch.randn(2, 8, 12, 10)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    graph = _export(model, x)
    counted = graph_flops(graph)

    assert counted["uncounted"] == []
    assert {"Conv", "ConvTranspose", "MatMul", "Gemm"} <= set(counted["by_op"])
    assert counted["gflops"] == pytest.approx(counter.get_total_flops() / 1e9, rel=1e-9)


def test_hand_counted_convolution():
    # 2 x (out elements 2 x 16 x 6 x 5) x (in channels per group 4 x kernel 3 x 3)
    graph = _export(nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2).eval(), torch.randn(2, 8, 12, 10))
    assert graph_flops(graph)["gflops"] * 1e9 == 2 * (2 * 16 * 6 * 5) * (4 * 3 * 3)


def test_unknown_shapes_are_listed_not_guessed():
    # a dynamic batch leaves the output shapes symbolic: the nodes are reported, not counted as zero work
    buffer = io.BytesIO()
    torch.onnx.export(nn.Linear(4, 3).eval(), (torch.randn(2, 6, 4),), buffer, input_names=["x"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    counted = graph_flops(onnx.load_from_string(buffer.getvalue()))
    assert counted["gflops"] == 0 and len(counted["uncounted"]) == 1
