"""The exported forecaster (ONNX Runtime) is the PyTorch forecaster; the tool refuses what it cannot do."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import torch

from perception.export.motion_onnx import INPUT_NAMES, OUTPUT_NAMES, example_inputs, export_forecaster
from perception.models.trajectory_transformer import TrajectoryTransformer


def test_onnx_forecaster_matches_pytorch_for_any_number_of_agents(tmp_path):
    torch.manual_seed(0)
    model = TrajectoryTransformer(dim=32, num_heads=4, ffn_dim=64, num_modes=3).eval()
    path = str(tmp_path / "forecaster.onnx")
    sidecar = export_forecaster(model, path, max_lanes=16)
    assert sidecar["parity"]["trajectories"] < 1e-4 and sidecar["parity"]["probabilities"] < 1e-5
    graph = onnx.load(path)
    assert not {n.op_type for n in graph.graph.node} & {"Loop", "If", "Scan"}
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for i in list(graph.graph.input)
               + list(graph.graph.output))
    assert {p.key for p in graph.metadata_props} >= {"package_version", "git_commit"}
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        inputs = example_inputs(model, batch, 16, seed=10 + batch)
        outputs = session.run(list(OUTPUT_NAMES), {n: t.numpy() for n, t in zip(INPUT_NAMES, inputs)})
        with torch.no_grad():
            reference = model.forecast(*inputs)
        for got, expected in zip(outputs, reference):
            np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
    with open(tmp_path / "forecaster.json") as f:
        assert json.load(f)["outputs"]["trajectories"]["shape"] == ["agents", 3, 12, 2]

