"""CLRNet's line IoU loss for the lane points (loss_weights.lane_line_iou > 0 turns it on)."""

from __future__ import annotations

import pytest
import torch

from perception.losses.lane_loss import LINE_IOU_HALF_WIDTH, LINE_IOU_LOSS, LaneCriterion, line_iou_loss


def test_line_iou_is_the_widened_rows_overlap_over_union():
    truth = torch.full((1, 4), 0.5)
    visible = torch.tensor([[True, True, True, False]])
    assert line_iou_loss(truth, truth, visible).item() == pytest.approx(0.0)
    e, shift = LINE_IOU_HALF_WIDTH, 0.01
    near = truth + shift
    near[0, 3] = 5.0  # an invisible row is not read
    assert line_iou_loss(near, truth, visible).item() == pytest.approx(1 - (2 * e - shift) / (2 * e + shift))
    # Segments apart: the overlap is negative, the loss passes 1 and still grows with the distance.
    far, farther = line_iou_loss(truth + 0.1, truth, visible), line_iou_loss(truth + 0.2, truth, visible)
    assert 1.0 < far.item() < farther.item() < 2.0


def test_the_gradient_pulls_each_row_towards_the_truth():
    truth = torch.tensor([[0.3, 0.4, 0.5]])
    points = torch.tensor([[0.32, 0.37, 0.5]], requires_grad=True)
    line_iou_loss(points, truth, torch.ones(1, 3, dtype=torch.bool)).sum().backward()
    assert points.grad[0, 0] > 0 and points.grad[0, 1] < 0  # descent moves row 0 left and row 1 right


def _lane_batch(offset: float):
    truth = torch.full((6,), 0.4)
    targets = {"lanes": {"valid": torch.tensor([True]), "input_size": (224, 448), "per_image": [
        {"polylines": [torch.tensor([[0.4 * 448, 224.0], [0.4 * 448, 0.0]])], "labels": torch.tensor([0])}]}}
    points = torch.stack([truth + offset, torch.full((6,), 0.9)])[None]  # query 0 near the lane, query 1 far
    outputs = {"lanes.logits": torch.zeros(1, 2, 2), "lanes.points": points, "lanes.visibility": torch.zeros(1, 2, 6)}
    return outputs, targets


def test_the_criterion_adds_the_line_iou_only_when_asked():
    outputs, targets = _lane_batch(0.0)
    assert LINE_IOU_LOSS not in LaneCriterion(dense_weight=0.0)(outputs, targets)
    on = LaneCriterion(dense_weight=0.0, line_iou=True)
    assert on(outputs, targets)[LINE_IOU_LOSS].item() == pytest.approx(0.0, abs=1e-5)
    assert on(*_lane_batch(0.02))[LINE_IOU_LOSS].item() > 0.3


def test_the_lane_criterion_is_built_with_the_line_iou_from_its_weight():
    from conftest import experiment_dict

    from perception.config import parse_config
    from perception.tasks.lanes import LANES

    assert not LANES.build_criterion(parse_config(experiment_dict("unused"))).line_iou
    cfg = parse_config(experiment_dict("unused", loss_weights={LINE_IOU_LOSS: 2.0}))
    assert LANES.build_criterion(cfg).line_iou
