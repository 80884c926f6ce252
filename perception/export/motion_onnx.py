"""Export the trajectory forecaster to ONNX and prove the exported graph is the same model.

The graph is the whole autoregressive forecast: encoder, then the decoder unrolled for the
fixed number of future steps (no Loop / If nodes: the step count is a constant of the model).
Inputs and outputs are float32 (masks as 1.0 / 0.0), so TensorRT needs no bool or int64 I/O.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from torch import nn

from perception.export.provenance import provenance, set_metadata
from perception.models.trajectory_transformer import TrajectoryTransformer

INPUT_NAMES = ("history", "history_valid", "lanes", "lanes_valid")
OUTPUT_NAMES = ("trajectories", "probabilities")


class ForecastGraph(nn.Module):
    """forward = TrajectoryTransformer.forecast (what runs in the car)."""

    def __init__(self, model: TrajectoryTransformer):
        super().__init__()
        self.model = model

    def forward(self, history, history_valid, lanes, lanes_valid):
        return self.model.forecast(history, history_valid, lanes, lanes_valid)


def example_inputs(model: TrajectoryTransformer, batch: int, max_lanes: int, seed: int = 0) -> tuple:
    """Plausible inputs [batch, ...] (agents moving along +y, some padding) for tracing and checks."""
    g = torch.Generator().manual_seed(seed)
    speed = 2.0 + 8.0 * torch.rand(batch, 1, 1, generator=g)
    steps = torch.arange(-model.past_steps, 0, dtype=torch.float32)[None, :, None]
    history = torch.cat([torch.zeros(batch, model.past_steps, 1), torch.ones(batch, model.past_steps, 1)], -1)
    history = history * steps * speed * 0.5 + 0.2 * torch.randn(batch, model.past_steps, 2, generator=g)
    history_valid = (torch.rand(batch, model.past_steps, generator=g) > 0.2).float()
    history_valid[:, -1] = 1.0
    lanes = torch.randn(batch, max_lanes, model.lane_points, 4, generator=g) * 10.0
    lanes[..., 2:] = torch.nn.functional.normalize(lanes[..., 2:], dim=-1)
    lanes_valid = (torch.rand(batch, max_lanes, generator=g) > 0.3).float()
    return history, history_valid, lanes, lanes_valid


def export_forecaster(model: TrajectoryTransformer, path: str, max_lanes: int, batch: int | None = None,
                      opset: int = 17, config_text: str = "") -> dict:
    """Write ``path`` (+ ``<path stem>.json`` sidecar); batch=None exports a dynamic agent axis.

    Returns the sidecar dict including the parity check against PyTorch.
    """
    import onnx

    model = model.eval()
    graph = ForecastGraph(model)
    trace_batch = batch or 2
    inputs = example_inputs(model, trace_batch, max_lanes, seed=0)
    dynamic_axes = None
    if batch is None:
        dynamic_axes = {name: {0: "agents"} for name in INPUT_NAMES + OUTPUT_NAMES}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(graph, inputs, path, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)
    onnx_model = onnx.load(path)
    onnx.checker.check_model(onnx_model, full_check=True)
    control_flow = sorted({n.op_type for n in onnx_model.graph.node} & {"Loop", "If", "Scan"})
    if control_flow:
        raise RuntimeError(f"exported forecaster has data-dependent control flow nodes {control_flow}")

    # Parity on a second, different input (and another batch size when the axis is dynamic).
    check_batch = batch or 5
    parity = check_parity(graph, path, example_inputs(model, check_batch, max_lanes, seed=1))
    agents = "agents" if batch is None else batch
    sidecar = {
        "model": "TrajectoryTransformer (perception.models.trajectory_transformer)",
        "inputs": {
            "history": {"shape": [agents, model.past_steps, 2], "dtype": "float32",
                        "meaning": "past positions, oldest first, agent frame (m): +y = heading, +x = right"},
            "history_valid": {"shape": [agents, model.past_steps], "dtype": "float32",
                              "meaning": "1 = past position exists, 0 = padding"},
            "lanes": {"shape": [agents, max_lanes, model.lane_points, 4], "dtype": "float32",
                      "meaning": "lane centreline segments, (x, y, cos, sin of the lane direction), agent frame"},
            "lanes_valid": {"shape": [agents, max_lanes], "dtype": "float32",
                            "meaning": "1 = lane segment present, 0 = padding"},
        },
        "outputs": {
            "trajectories": {"shape": [agents, model.num_modes, model.future_steps, 2],
                             "meaning": "future positions at 2 Hz, agent frame (m)"},
            "probabilities": {"shape": [agents, model.num_modes], "meaning": "mode probabilities (softmax)"},
        },
        "opset": opset,
        **provenance(config_text),
        "parity": parity,
    }
    set_metadata(onnx_model, {k: sidecar[k] for k in ("package_version", "git_commit", "config_sha256")})
    onnx.save(onnx_model, path)
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(sidecar, f, indent=1)
    return sidecar


def check_parity(graph: nn.Module, path: str, inputs: tuple) -> dict:
    """Max |ONNX Runtime - PyTorch| per output on ``inputs``."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    with torch.no_grad():
        reference = [t.numpy() for t in graph(*inputs)]
    outputs = session.run(list(OUTPUT_NAMES), {n: t.numpy() for n, t in zip(INPUT_NAMES, inputs)})
    return {name: float(np.abs(o - r).max()) for name, o, r in zip(OUTPUT_NAMES, outputs, reference)} | {
        "batch": int(inputs[0].shape[0])}
