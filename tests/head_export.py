"""Shared by the head tests: one head exported to ONNX and run by ONNX Runtime; a one-object obstacle target; a
few Adam steps of a head on its criterion."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import torch

GRAPH_PLUMBING = {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"}  # of an unsimplified export


def export_head(head: torch.nn.Module, levels: list[torch.Tensor], names: list[str],
                path: str) -> tuple[set[str], list[np.ndarray]]:
    """Export ``head`` (in eval mode) on FPN ``levels`` with outputs ``names`` (opset 17); returns the graph's op
    types and ONNX Runtime's outputs. The inputs are named ``level{i}``: ONNX drops the levels a head never reads."""

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = head

        def forward(self, *inputs):
            result = self.head(list(inputs))
            return tuple(result[name] for name in names)

    with torch.no_grad():
        torch.onnx.export(Graph(), tuple(levels), path, opset_version=17, dynamo=False,
                          input_names=[f"level{i}" for i in range(len(levels))])
    ops = {node.op_type for node in onnx.load(path).graph.node}
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: levels[int(i.name[len("level"):])].numpy() for i in session.get_inputs()}
    return ops, session.run(None, feeds)


def one_obstacle(yaw: float) -> dict:
    """Obstacle targets of one 32x64 image with one car (camera frame, input pixels)."""
    return {"obstacles": {"valid": torch.tensor([True]), "input_size": (32, 64), "per_image": [{
        "boxes_xyxy": torch.tensor([[10.0, 8.0, 30.0, 24.0]]), "labels": torch.tensor([0]),
        "center_uv": torch.tensor([[20.0, 16.0]]), "center_cam": torch.tensor([[1.0, 0.5, 12.0]]),
        "size_wlh": torch.tensor([[1.9, 4.5, 1.6]]), "yaw": torch.tensor([yaw]),
        "velocity": torch.tensor([[0.0, 5.0]]), "attributes": torch.tensor([-1]),
        "intrinsics": torch.tensor([[50.0, 0, 32], [0, 50.0, 16], [0, 0, 1]])}]}}


def train_head(head: torch.nn.Module, criterion, levels: list[torch.Tensor], targets: dict, steps: int,
               loss_name: str) -> list[float]:
    """``steps`` Adam steps (lr 3e-3) of ``head`` on the sum of ``criterion``'s losses; returns ``loss_name`` at
    each step, before that step's update."""
    optimiser = torch.optim.Adam(head.parameters(), lr=3e-3)
    history = []
    for _ in range(steps):
        losses = criterion(head(levels), targets, head=head)
        history.append(losses[loss_name].item())
        optimiser.zero_grad()
        sum(losses.values()).backward()
        optimiser.step()
    return history
