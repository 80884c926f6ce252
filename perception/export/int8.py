"""INT8 with explicit quantization: a Q/DQ copy of an exported fp32 camera graph, calibrated on real images.

Why ONNX Runtime's ``quantize_static`` (QDQ format) and not NVIDIA Model Optimizer: both write
QuantizeLinear / DequantizeLinear pairs that TensorRT 8.6+/10 fuses into INT8 kernels (explicit
quantization: TensorRT takes the scales from the graph and needs no calibrator of its own);
ONNX Runtime's quantizer ships in the ``onnxruntime`` wheel we already use, runs on the CPU and
its Q/DQ graph also runs in ONNX Runtime, so the same ``tools/test.py --onnx`` scores it. Model
Optimizer would add a dependency of several hundred MB for the same graph form.

TensorRT's rules, set here: symmetric INT8 (zero point 0) for activations and weights,
per-channel weight scales, biases left in float (no INT32 Q/DQ), and only the ops TensorRT
runs in INT8 quantized (Conv, MatMul, Gemm). Everything else stays float: softmax, layer norm,
GELU, the sampling (GridSample), and the heads' final projections (the layers producing the
graph outputs: boxes and logits, whose small differences move scores and boxes most), found by
walking back from each output. The lane and light heads stay float entirely (``FLOAT_HEADS``,
found from the graph's wiring by ``head_nodes``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os

import numpy as np

from perception.tasks import CAMERA_TASKS

QUANTIZED_OPS = ("Conv", "MatMul", "Gemm")
# Tasks whose heads stay entirely in float by default (Task.int8_float): measured on the demo checkpoint,
# quantizing the lane and light heads cost lane F1 and light AP50 more than the 1 % budget (README); they are
# a small share of the FLOPs.
FLOAT_HEADS = tuple(task.name for task in CAMERA_TASKS if task.int8_float)
# Ops a walk back from an output passes through to find the projection that produced it.
_PASS_THROUGH = frozenset({"Add", "Sigmoid", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice",
                           "Split", "Mul", "Sub", "Div", "Identity", "Flatten", "Tanh", "Exp", "Clip", "Gather"})


def final_projections(model) -> list[str]:
    """Names of the Conv / MatMul / Gemm nodes that produce a graph output (through element-wise and
    data-movement ops only): kept in float."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found, stack, seen = [], [o.name for o in model.graph.output], set()
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in QUANTIZED_OPS:
            found.append(node.name)
        elif node.op_type in _PASS_THROUGH:
            stack += list(node.input)
    return sorted(found)


def activation_matmuls(model) -> list[str]:
    """Names of the MatMul nodes whose two inputs are both activations (no weight): attention's scores q k^T and
    its weighted sum of values. Their inputs' ranges differ per image and per head, and a softmax's weights are
    mostly near 0 with a few near 1, which one INT8 scale per tensor resolves badly."""
    constants = {init.name for init in model.graph.initializer}
    constants |= {out for node in model.graph.node if node.op_type == "Constant" for out in node.output}
    return [node.name for node in model.graph.node
            if node.op_type == "MatMul" and not any(name in constants for name in node.input)]


def head_nodes(model, tasks: tuple[str, ...]) -> set[str]:
    """Names of the nodes whose results reach only the outputs of ``tasks`` (``<task>.*``): those heads.

    Found from the graph's wiring, not from node names: the simplifier fuses MatMul + Add into Gemm
    nodes named ``Gemm_<n>``, which lose the ``/model/<head>/`` scope (151 of the demo's Linear layers).
    ONNX nodes are stored in topological order, so walking them backwards visits every consumer of a
    tensor before its producer."""
    graph = model.graph
    reach: dict[str, set[str]] = {o.name: {o.name.split(".")[0]} for o in graph.output}  # tensor -> tasks
    wanted, found = set(tasks), set()
    for node in reversed(graph.node):
        tasks_reached = set().union(*(reach.get(name, set()) for name in node.output))
        if tasks_reached and tasks_reached <= wanted:
            found.add(node.name)
        for name in node.input:
            reach.setdefault(name, set()).update(tasks_reached)
    return found


class _Batches:
    """ONNX Runtime's CalibrationDataReader protocol over [N,3,H,W] images in the graph's batch size."""

    def __init__(self, input_name: str, images: np.ndarray, batch: int):
        self.feeds = [{input_name: images[i:i + batch]} for i in range(0, len(images) - batch + 1, batch)]
        self.position = 0

    def get_next(self):
        if self.position >= len(self.feeds):
            return None
        self.position += 1
        return self.feeds[self.position - 1]

    def rewind(self):
        self.position = 0


def quantize_camera_model(fp32_path: str, int8_path: str, calibration_images: np.ndarray, method: str = "percentile",
                          float_heads: tuple[str, ...] = FLOAT_HEADS) -> dict:
    """Write the Q/DQ graph of ``fp32_path`` to ``int8_path``; returns what the sidecar records.

    ``calibration_images``: [N,3,H,W] float32, normalised as the network input, N a multiple of
    the graph's batch (the remainder is dropped). ``method``: "percentile" (99.999th, robust to a
    few extreme activations) or "minmax". The heads of ``float_heads`` (task names, found by
    ``head_nodes``) stay float entirely."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = onnx.load(fp32_path)
    graph_input = model.graph.input[0]
    batch = graph_input.type.tensor_type.shape.dim[0].dim_value or 1
    if len(calibration_images) < batch:
        raise ValueError(f"INT8 calibration needs at least {batch} images (one batch of {fp32_path}), "
                         f"got {len(calibration_images)}")
    methods = {"percentile": CalibrationMethod.Percentile, "minmax": CalibrationMethod.MinMax}
    if method not in methods:
        raise ValueError(f"calibration method {method!r}: use one of {sorted(methods)}")
    heads = head_nodes(model, tuple(float_heads))
    in_float_heads = {n.name for n in model.graph.node if n.op_type in QUANTIZED_OPS and n.name in heads}
    excluded = sorted(set(final_projections(model)) | in_float_heads | set(activation_matmuls(model)))
    reader = _Batches(graph_input.name, np.ascontiguousarray(calibration_images, np.float32), batch)
    # No quant_pre_process: its ONNX Runtime graph optimisations would leave runtime-specific ops in the graph
    # (the quantizer logs a warning suggesting it, and progress lines: quiet while it runs).
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(fp32_path, int8_path, reader, quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=list(QUANTIZED_OPS), per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
                            calibrate_method=methods[method],
                            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                           "QuantizeBias": False,  # TensorRT takes no INT32 DequantizeLinear
                                           "CalibPercentile": 99.999, "CalibMovingAverage": False})
    finally:
        root.setLevel(level)
    quantized = onnx.load(int8_path)
    return {"calibration": {"method": method, "images": len(reader.feeds) * batch},
            "kept_in_float": excluded, **scale_summary(quantized)}


def scale_summary(model) -> dict:
    """Counts of Q/DQ nodes and the spread of the activation scales (one per QuantizeLinear)."""
    from onnx import numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    scales = []
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[1] in initializers:
            scales.append(float(numpy_helper.to_array(initializers[node.input[1]]).reshape(-1)[0]))
    ops = [n.op_type for n in model.graph.node]
    summary = {"quantize_nodes": ops.count("QuantizeLinear"), "dequantize_nodes": ops.count("DequantizeLinear")}
    if scales:
        summary["activation_scales"] = {"min": min(scales), "median": float(np.median(scales)), "max": max(scales)}
    return summary


def int8_path_for(path: str) -> str:
    """model.onnx -> model.int8.onnx"""
    stem, extension = os.path.splitext(path)
    return f"{stem}.int8{extension or '.onnx'}"
