"""Dense depth (``model.heads.obstacles.dense_depth``): every token's depth code in training only, trained at the
box ATSS positives towards their object's depth, and nothing of it in inference or the exported graph."""

from __future__ import annotations

import pytest
import torch

from perception.losses.dense_assign import atss_assign, level_sizes
from perception.losses.matcher import HungarianMatcher
from perception.losses.obstacle_loss import ObstacleCriterion
from perception.models.heads.obstacles import ObstacleHead

INPUT = (224, 448)


def _target(box_xyxy: list[float], depth_m: float, label: int = 0) -> dict:
    x0, y0, x1, y1 = box_xyxy
    return {"boxes_xyxy": torch.tensor([box_xyxy]), "labels": torch.tensor([label]),
            "center_uv": torch.tensor([[(x0 + x1) / 2, (y0 + y1) / 2]]),
            "center_cam": torch.tensor([[0.0, 1.0, depth_m]]), "size_wlh": torch.tensor([[1.9, 4.5, 1.6]]),
            "yaw": torch.tensor([0.3]), "velocity": torch.zeros(1, 2), "attributes": torch.tensor([0]),
            "intrinsics": torch.tensor([[400.0, 0, 224], [0, 400.0, 112], [0, 0, 1]])}


def _head(dense_depth: bool) -> ObstacleHead:
    torch.manual_seed(0)
    head = ObstacleHead(16, dim=32, num_queries=10, num_layers=1, ffn_dim=64, dense_depth=dense_depth)
    if dense_depth:
        with torch.no_grad():  # the zero-initialised last layer would give every token the same depth
            head.dense_depth.layers[-1].weight.normal_(0, 0.1)
    return head


def _features() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(2, 16, INPUT[0] // s, INPUT[1] // s) for s in (4, 8, 16, 32)]


def test_dense_depth_is_a_training_output_only():
    head = _head(dense_depth=True)
    outputs = head.train()(_features())
    assert outputs["obstacles.dense.depth"].shape == (2, 28 * 56 + 14 * 28 + 7 * 14)
    assert not any(".dense." in k for k in head.eval()(_features()))
    assert "obstacles.dense.depth" not in _head(dense_depth=False).train()(_features())


def test_the_dense_depth_loss_is_the_l1_at_the_atss_positives_and_trains_only_them():
    head = _head(dense_depth=True).train()
    outputs = head(_features())
    per_image = [_target([100.0, 100.0, 160.0, 150.0], 20.0), _target([300.0, 60.0, 420.0, 200.0], 8.0, label=1)]
    criterion = ObstacleCriterion(HungarianMatcher(), dense_weight=1.0)
    encoded = criterion.encode(per_image, INPUT, outputs, "cpu")
    dense = {k.split(".")[-1]: v for k, v in outputs.items() if k.startswith("obstacles.dense.")}
    losses = criterion.dense_losses(dense, encoded, INPUT, head.propose)

    anchors = dense["anchors"][0]
    assigned = torch.stack([atss_assign(anchors, level_sizes(anchors), t["boxes"], INPUT[1] / INPUT[0])[0]
                            for t in encoded])  # (B, N): -1 or the object's index in its image
    b, n = torch.nonzero(assigned >= 0, as_tuple=True)
    target_depth = torch.stack([encoded[i]["depth"][0] for i in range(2)])[b]  # one object per image
    reference = (dense["depth"][b, n] - target_depth).abs().mean()
    assert losses["obstacle_depth"].item() == pytest.approx(reference.item(), rel=1e-5)

    grad, = torch.autograd.grad(losses["obstacle_depth"], outputs["obstacles.dense.depth"])
    trained = grad != 0
    assert trained.sum() == len(b) and trained[b, n].all()  # the positives, and only they
    # each positive is pulled towards its own object's depth: the far object's tokens up where they sit below it
    towards = -grad[b, n] * (target_depth - dense["depth"][b, n].detach())
    assert (towards > 0).all()


def test_without_dense_depth_the_obstacle_losses_are_unchanged():
    """The dense loss adds the depth term only when the head predicts it: the same head weights, with and without
    the dense depth module, give the same losses otherwise."""
    per_image = [_target([100.0, 100.0, 160.0, 150.0], 20.0)] * 2
    targets = {"obstacles": {"valid": torch.tensor([True, True]), "input_size": INPUT, "per_image": per_image}}
    criterion = ObstacleCriterion(HungarianMatcher(), dense_weight=1.0)
    with_depth = _head(dense_depth=True).train()
    without = _head(dense_depth=False).train()
    without.load_state_dict({k: v for k, v in with_depth.state_dict().items() if not k.startswith("dense_")})
    losses_with = criterion(with_depth(_features()), targets, head=with_depth)
    losses_without = criterion(without(_features()), targets, head=without)
    for name in losses_without:
        if name != "obstacle_depth":
            assert losses_with[name].item() == pytest.approx(losses_without[name].item(), rel=1e-6), name
    assert losses_with["obstacle_depth"].item() > losses_without["obstacle_depth"].item()


def test_dense_depth_from_the_config():
    from perception.build import build_model
    from perception.config import parse_config
    from tests.conftest import TINY_MODEL, experiment_dict

    model_cfg = {**TINY_MODEL, "heads": {**TINY_MODEL["heads"], "obstacles": dict(dim=32, num_queries=10, num_layers=1,
                                                                                 ffn_dim=64, dense_depth=True)}}
    cfg = parse_config(experiment_dict("/unused", model=model_cfg))
    model = build_model(cfg.model, tuple(cfg.input_size)).train()
    assert model.heads["obstacles"].dense_depth is not None
