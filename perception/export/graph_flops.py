"""FLOPs of an ONNX graph, counted from its static shapes.

One counting rule for every graph, ours and a peer's: the benchmarks compare GFLOP/s of graphs exported
by different tools, and torch's FlopCounterMode only sees PyTorch models. Counted as 2 x multiply-adds of
the operators that carry the arithmetic (Conv, ConvTranspose, MatMul, Gemm, their integer and Q/DQ-fused
forms); element-wise operators, normalisations and softmax are left out, as torch's counter leaves them out.
"""

from __future__ import annotations

import math

import onnx

COUNTED = ("Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger", "ConvInteger", "QLinearConv",
           "QLinearMatMul")


def _shape_table(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Static shape of every tensor the graph names (inputs, initialisers, inferred intermediates)."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)  # Shape -> Reshape chains
    shapes: dict[str, list[int]] = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    for node in graph.node:  # Constant nodes hold weights in some exporters
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    shapes[node.output[0]] = list(attr.t.dims)  # the shape without decoding the values
    return shapes


def _attribute(node: onnx.NodeProto, name: str, default):
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def node_flops(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> int | None:
    """2 x multiply-adds of one node; None where a shape the count needs is unknown."""
    op = node.op_type
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        weight = shapes.get(node.input[3 if op == "QLinearConv" else 1])
        out = shapes.get(node.output[0])
        if weight is None or out is None:
            return None
        # each output element: (C_in / group) x kernel multiply-adds; weight is (C_out, C_in / group, *kernel)
        return 2 * math.prod(out) * math.prod(weight[1:])
    if op == "ConvTranspose":
        weight, x = shapes.get(node.input[1]), shapes.get(node.input[0])
        if weight is None or x is None:
            return None
        # each input element scatters into (C_out / group) x kernel outputs; weight is (C_in, C_out / group, *kernel)
        return 2 * math.prod(x) * math.prod(weight[1:])
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = shapes.get(node.input[0])
        out = shapes.get(node.output[0])
        if a is None or out is None:
            return None
        return 2 * math.prod(out) * a[-1]
    if op == "Gemm":
        a, out = shapes.get(node.input[0]), shapes.get(node.output[0])
        if a is None or out is None:
            return None
        inner = a[0] if _attribute(node, "transA", 0) else a[1]
        return 2 * math.prod(out) * inner
    return 0


def graph_flops(model: onnx.ModelProto | str) -> dict:
    """``{"gflops": total, "by_op": {op_type: GFLOPs}, "uncounted": [node names whose shapes were unknown]}``.

    Nodes inside subgraphs (If / Loop bodies) are not counted; the camera graphs have none."""
    if isinstance(model, str):
        model = onnx.load(model)
    shapes = _shape_table(model)
    by_op: dict[str, float] = {}
    uncounted = []
    for node in model.graph.node:
        if node.op_type not in COUNTED:
            continue
        flops = node_flops(node, shapes)
        if flops is None:
            uncounted.append(node.name or node.output[0])
            continue
        by_op[node.op_type] = by_op.get(node.op_type, 0.0) + flops / 1e9
    return {"gflops": sum(by_op.values()), "by_op": by_op, "uncounted": uncounted}
