"""INT8 with explicit quantization (perception/export/int8.py): a Q/DQ graph TensorRT can build from, close to fp32."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from test_camera_export import INPUT_SIZE, four_task_model  # noqa: F401  (the module's fixture)

from perception.export.camera_onnx import export_camera_model, synthetic_camera_images
from perception.export.graph_checks import check_structure, query_set_agreement
from perception.export.int8 import (
    FLOAT_HEADS,
    activation_matmuls,
    final_projections,
    head_nodes,
    int8_path_for,
    quantize_camera_model,
)

# Stated tolerances of the Q/DQ graph against fp32 on an unseen input (random-weight tiny model):
DENSE_RELATIVE = 0.2  # drivable logits: max |diff| <= 0.2 x max |fp32|
QUERY_TOLERANCE = 0.2  # query heads, matched as sets (selection may reorder): within 0.2 + 0.2 x max |fp32| ...
QUERY_AGREEMENT = 0.85  # ... for at least 85 % of the queries


@pytest.fixture(scope="module")
def quantized(four_task_model, tmp_path_factory):  # noqa: F811
    _, model = four_task_model
    root = tmp_path_factory.mktemp("int8")
    fp32 = str(root / "model.onnx")
    export_camera_model(model, INPUT_SIZE, fp32, batch=2, fp16_images=2)
    calibration = synthetic_camera_images(8, INPUT_SIZE, seed=3).numpy()
    int8 = int8_path_for(fp32)
    report = quantize_camera_model(fp32, int8, calibration)
    return fp32, int8, report


def test_qdq_graph_passes_the_structural_checks_with_symmetric_int8(quantized):
    _, int8, report = quantized
    graph = onnx.load(int8)
    structure = check_structure(graph)
    assert not structure["problems"], structure["problems"]
    assert structure["ops"]["QuantizeLinear"] == report["quantize_nodes"] > 50
    initializers = {t.name: t for t in graph.graph.initializer}
    for node in graph.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) == 3:
            zero_point = numpy_helper.to_array(initializers[node.input[2]])
            assert zero_point.dtype == np.int8 and not zero_point.any()  # TensorRT: symmetric, zero point 0
    assert report["calibration"] == {"method": "percentile", "images": 8}


def test_only_conv_and_matmul_weights_are_int8_and_output_projections_and_float_heads_stay_float(quantized):
    fp32, int8, report = quantized
    graph = onnx.load(int8)
    initializers = {t.name for t in graph.graph.initializer}
    producer = {out: node for node in graph.graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in graph.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    weight_dequantize = [n for n in graph.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in initializers]
    assert weight_dequantize
    for node in weight_dequantize:  # INT8 weights feed only the ops TensorRT runs in INT8
        assert {c.op_type for c in consumers[node.output[0]]} <= {"Conv", "MatMul", "Gemm"}
    kept = set(report["kept_in_float"])
    fp32_model = onnx.load(fp32)
    fp32_graph = fp32_model.graph
    fp32_nodes = fp32_graph.node
    learned = {t.name for t in fp32_graph.initializer}
    heads = head_nodes(fp32_model, FLOAT_HEADS)
    lane_and_light_layers = {n.name for n in fp32_nodes if n.op_type in ("Conv", "MatMul", "Gemm") and n.name in heads}
    # Every layer of the lane and light heads, the Gemm nodes the simplifier renamed included.
    assert {n.name for n in fp32_nodes if n.name.startswith(("/model/lanes/", "/model/lights/"))
            and n.op_type in ("Conv", "MatMul", "Gemm")} < lane_and_light_layers
    # Attention's activation x activation matmuls (scores, weighted values) stay float too: the backbone's among them.
    attention_products = set(activation_matmuls(fp32_model))
    assert any("/backbone/" in name for name in attention_products)
    assert not any(name in learned for n in fp32_nodes if n.name in attention_products for name in n.input)
    assert kept == set(final_projections(fp32_model)) | lane_and_light_layers | attention_products
    assert lane_and_light_layers
    checked = 0
    for node in fp32_graph.node:
        if (node.name in kept or node.op_type == "LayerNormalization") and node.input[1] in learned:
            # the same weight tensor in the Q/DQ graph is still a float initializer, not a DequantizeLinear output
            assert node.input[1] in initializers and node.input[1] not in producer, node.name
            checked += 1
    assert checked >= 5


def test_qdq_outputs_stay_within_the_stated_tolerance_of_fp32(quantized):
    fp32, int8, _ = quantized
    images = synthetic_camera_images(2, INPUT_SIZE, seed=9).numpy()  # not a calibration image
    reference_session = ort.InferenceSession(fp32, providers=["CPUExecutionProvider"])
    names = [o.name for o in reference_session.get_outputs()]
    reference = dict(zip(names, reference_session.run(names, {"images": images})))
    # Graph optimisations off: every Q/DQ pair runs as written (quantise, dequantise, float Conv / MatMul), so
    # this measures the graph's fidelity, not a CPU's fused INT8 kernels (on an AVX2-only EPYC without VNNI, with
    # them fused, the drivable logits were 0.38 off, 2026-12-04; they passed on AVX512 machines).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    actual = dict(zip(names, ort.InferenceSession(int8, options, providers=["CPUExecutionProvider"]).run(
        names, {"images": images})))
    dense = np.abs(reference["drivable.logits"] - actual["drivable.logits"]).max()
    assert dense <= DENSE_RELATIVE * np.abs(reference["drivable.logits"]).max()
    for head in ("obstacles", "lanes", "lights"):
        outputs = [n for n in names if n.startswith(f"{head}.")]
        agreement = query_set_agreement(reference, actual, outputs, QUERY_TOLERANCE, QUERY_TOLERANCE)
        assert agreement["matched"] >= QUERY_AGREEMENT * agreement["queries"], (head, agreement)
