"""Depth uncertainty of the obstacle head (model.heads.obstacles.depth_uncertainty; MonoDLE / GUPNet): a Laplace
scale per depth, trained by the Laplace negative log-likelihood, and detections ranked by class score x the chance
that the depth is within a metre."""

import math

import numpy as np
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head, one_obstacle, train_head

from perception.build import build_model
from perception.config import parse_config
from perception.core.obstacle_coding import encode_depth
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.losses.obstacle_loss import ObstacleCriterion
from perception.models.heads.obstacles import INITIAL_DEPTH_LOG_SCALE, ObstacleHead
from perception.postprocess.obstacles import decode_image, depth_confidence


def test_laplace_loss_learns_the_scale_of_the_error():
    """With the depth held 0.3 off, the log scale goes to log(sqrt(2) x 0.3), the loss's minimum."""
    depth, target = torch.full((4,), 1.3), torch.ones(4)
    log_scale = torch.zeros(4, requires_grad=True)
    optimiser = torch.optim.Adam([log_scale], lr=0.05)
    for _ in range(400):
        loss = ObstacleCriterion.laplace_depth_loss(depth, log_scale, target, 4)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert torch.allclose(log_scale, torch.full((4,), math.log(math.sqrt(2) * 0.3)), atol=0.02), log_scale
    # A confident scale pulls the depth harder than the plain L1 (gradient sqrt(2) / b instead of 1).
    depth = torch.tensor([1.3], requires_grad=True)
    ObstacleCriterion.laplace_depth_loss(depth, torch.tensor([math.log(0.1)]), torch.ones(1), 1).backward()
    assert math.isclose(depth.grad.item(), math.sqrt(2) / 0.1, rel_tol=1e-4)


def test_head_with_depth_uncertainty_trains_it_and_exports_it(tmp_path):
    torch.manual_seed(0)
    plain = ObstacleHead(16, dim=32, num_queries=5, num_layers=2, ffn_dim=64, levels=(1, 2))
    head = ObstacleHead(16, dim=32, num_queries=5, num_layers=2, ffn_dim=64, levels=(1, 2), depth_uncertainty=True)
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    assert "obstacles.depth_log_scale" not in plain(levels)
    outputs = head(levels)
    assert outputs["obstacles.depth_log_scale"].shape == (1, 5)
    assert torch.allclose(outputs["obstacles.depth_log_scale"], torch.full((1, 5), INITIAL_DEPTH_LOG_SCALE))
    assert outputs["obstacles.aux0.depth_log_scale"].shape == (1, 5)  # every decoder layer is supervised

    targets = one_obstacle(yaw=0.0)
    history = train_head(head, ObstacleCriterion(dense_weight=0.0), levels, targets, 60, "obstacle_depth")
    assert history[-1] < history[0] - 1.0, history  # the NLL falls as the depth fits and the scale narrows

    head.eval()
    with torch.no_grad():
        expected = head(levels)
    names = ["obstacles.depth", "obstacles.depth_log_scale"]
    ops, exported = export_head(head, levels, names, str(tmp_path / "depth.onnx"))
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING, ops - TENSORRT_8_6_OPS
    for name, value in zip(names, exported):
        assert np.abs(value - expected[name].numpy()).max() < 1e-4, name


def test_confidence_is_the_chance_the_depth_is_within_a_metre():
    # b = 0.05 of 10 m is a Laplace scale of 0.5 m: P(|error| < 1 m) = 1 - exp(-2).
    value = depth_confidence(torch.tensor([10.0, 40.0]), torch.log(torch.tensor([0.05, 0.05])))
    assert torch.allclose(value, torch.tensor([1 - math.exp(-2.0), 1 - math.exp(-0.5)]))


def _two_detections(log_scales: list[float]) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """One image, two queries of class 0 at 10 m, the first with the higher class score."""
    intrinsics = np.array([[100.0, 0, 32], [0, 100.0, 16], [0, 0, 1]])
    logits = torch.full((1, 2, 10), -10.0)
    logits[0, :, 0] = torch.tensor([2.0, 1.0])
    return intrinsics, {
        "obstacles.logits": logits, "obstacles.boxes": torch.tensor([[[0.2, 0.5, 0.1, 0.2], [0.7, 0.5, 0.1, 0.2]]]),
        "obstacles.center": torch.tensor([[[0.2, 0.5], [0.7, 0.5]]]),
        "obstacles.depth": encode_depth(torch.full((1, 2), 10.0), 100.0),
        "obstacles.size": torch.zeros(1, 2, 3), "obstacles.yaw": torch.tensor([[[0.0, 1.0], [0.0, 1.0]]]),
        "obstacles.velocity": torch.zeros(1, 2, 2), "obstacles.attribute": torch.zeros(1, 2, 8),
        "obstacles.depth_log_scale": torch.tensor([log_scales])}


def test_decoder_ranks_by_class_score_times_depth_confidence():
    intrinsics, outputs = _two_detections([math.log(0.3), math.log(0.02)])  # the second is far more certain
    boxes = decode_image(outputs, 0, intrinsics, (32, 64), use_depth_confidence=True)
    scores = torch.tensor([2.0, 1.0]).sigmoid() * depth_confidence(torch.full((2,), 10.0),
                                                                   torch.tensor([math.log(0.3), math.log(0.02)]))
    assert np.allclose(boxes.scores, [scores[1], scores[0]], atol=1e-6)  # best first
    assert np.allclose(boxes.center_cam[0, 0], (0.7 * 64 - 32) / 100 * 10, atol=1e-4)  # the second query's box
    unscaled = decode_image(outputs, 0, intrinsics, (32, 64))  # postprocess.obstacle_depth_confidence's default
    assert np.allclose(unscaled.scores, torch.tensor([2.0, 1.0]).sigmoid())
    del outputs["obstacles.depth_log_scale"]
    plain = decode_image(outputs, 0, intrinsics, (32, 64), use_depth_confidence=True)
    assert np.allclose(plain.scores, torch.tensor([2.0, 1.0]).sigmoid())


def test_config_switch_builds_the_output():
    cfg = parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(depth_uncertainty=True)))))
    model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    with torch.no_grad():
        outputs = model(torch.zeros(1, 3, *cfg.input_size))
    assert outputs["obstacles.depth_log_scale"].shape == outputs["obstacles.depth"].shape
