"""MultiBin headings of the obstacle head (model.heads.obstacles.yaw_bins; Deep3DBox): a bin classification and a
(sin, cos) residual per bin. Why: where the image leaves front and back ambiguous, one (sin, cos) regression is
pulled to the mean of the two, (0, 0), and its angle is noise (measured on the 2700-step demo checkpoint: predicted
norm 0.29, the axis a median 0.33 rad off but 41 % of the headings more than 90 degrees off)."""

import math

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head, one_obstacle, train_head

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.losses.obstacle_loss import ObstacleCriterion
from perception.models.heads.obstacles import ObstacleHead, yaw_bin_centres, yaw_from_bins


def _sincos(angle: float) -> torch.Tensor:
    return torch.tensor([math.sin(angle), math.cos(angle)])


def test_the_most_likely_bin_plus_its_residual_is_the_heading():
    centres = yaw_bin_centres(4)  # 0, 90, 180, 270 degrees
    residual = torch.stack([_sincos(0.0), _sincos(0.0), _sincos(0.2), _sincos(0.0)])[None]  # (1, 4, 2)
    per_bin, heading = yaw_from_bins(torch.tensor([[0.0, 1.0, 3.0, -1.0]]), residual, centres)
    assert torch.allclose(heading[0], _sincos(math.pi + 0.2), atol=1e-6)
    assert torch.allclose(per_bin[0, 1], _sincos(math.pi / 2), atol=1e-6)


def test_bins_keep_an_ambiguous_axis_that_a_single_regression_averages_away():
    """The same input, half the time heading 0.3 rad and half the time 0.3 + pi (front and back look alike)."""
    torch.manual_seed(0)
    targets = torch.stack([_sincos(0.3), _sincos(0.3 + math.pi)] * 8)  # (16, 2)
    logits = torch.zeros(4, requires_grad=True)
    residual = torch.tensor([[0.0, 1.0]] * 4, requires_grad=True)
    direct = torch.tensor([0.0, 1.0], requires_grad=True)
    optimiser = torch.optim.Adam([logits, residual, direct], lr=0.05)
    centres = yaw_bin_centres(4)
    for _ in range(300):
        per_bin, _ = yaw_from_bins(logits.expand(16, 4), residual.expand(16, 4, 2), centres)
        loss = ObstacleCriterion.yaw_bin_loss(logits.expand(16, 4), per_bin, targets, 16)
        loss = loss + torch.nn.functional.l1_loss(direct.expand(16, 2), targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    _, heading = yaw_from_bins(logits[None], residual[None], centres)
    angle = math.atan2(heading[0, 0].item(), heading[0, 1].item())
    axis_error = abs((angle - 0.3 + math.pi / 2) % math.pi - math.pi / 2)
    assert axis_error < 0.05, angle  # one of the two true headings
    assert abs(torch.linalg.norm(heading).item() - 1) < 0.05
    # The single regression cannot do better than anywhere between the two (sin, cos): the L1 of their midpoint.
    direct_error = torch.nn.functional.l1_loss(direct.expand(16, 2), targets).item()
    assert direct_error > 0.6, direct_error  # (|sin 0.3| + |cos 0.3|) / 2 = 0.63 per element


def test_head_with_bins_trains_them_and_exports_only_the_heading(tmp_path):
    torch.manual_seed(0)
    head = ObstacleHead(16, dim=32, num_queries=5, num_layers=2, ffn_dim=64, levels=(1, 2), yaw_bins=4)
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    outputs = head(levels)
    assert outputs["obstacles.yaw_bin_logits"].shape == (1, 5, 4)
    assert outputs["obstacles.yaw_per_bin"].shape == (1, 5, 4, 2)
    assert torch.allclose(outputs["obstacles.yaw"], _sincos(0.0).expand(1, 5, 2))  # every bin (0, 1) at the start
    targets = one_obstacle(yaw=2.0)
    history = train_head(head, ObstacleCriterion(dense_weight=0.0), levels, targets, 40, "obstacle_yaw")
    assert history[-1] < 0.5 * history[0], (history[0], history[-1])

    head.eval()
    with torch.no_grad():
        expected = head(levels)
    assert not any("yaw_bin" in k or "per_bin" in k for k in expected)

    ops, (yaw,) = export_head(head, levels, ["obstacles.yaw"], str(tmp_path / "yaw.onnx"))
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING, ops - TENSORRT_8_6_OPS
    assert np.abs(yaw - expected["obstacles.yaw"].numpy()).max() < 1e-4


def test_one_bin_is_a_config_error():
    with pytest.raises(ConfigError, match="yaw_bins"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(yaw_bins=1)))))
    parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(yaw_bins=4)))))
