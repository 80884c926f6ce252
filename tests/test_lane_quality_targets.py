"""IoU-aware lane class targets (matcher.lane_quality_targets): the quality focal loss and its targets."""

import pytest
import torch
from torchvision.ops import sigmoid_focal_loss

from perception.config import ConfigError
from perception.core.lane_overlap import lane_overlap_iou, paired_lane_overlap_iou, row_half_widths
from perception.losses.lane_loss import LaneCriterion, quality_focal_loss


def test_quality_one_is_the_focal_loss():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 1)
    batch, query, labels = torch.tensor([0, 1, 1]), torch.tensor([3, 0, 4]), torch.zeros(3, dtype=torch.int64)
    target = torch.zeros_like(logits)
    target[batch, query, labels] = 1.0
    expected = sigmoid_focal_loss(logits, target, 0.25, 2.0, reduction="sum")
    got = quality_focal_loss(logits, batch, query, labels, torch.ones(3), 0.25, 2.0)
    torch.testing.assert_close(got, expected)


def test_quality_loss_is_least_where_the_score_meets_the_quality():
    """A positive's loss, as a function of its score, is smallest at score = quality (no pull past the fit)."""
    batch, query, labels = torch.tensor([0]), torch.tensor([0]), torch.tensor([0])
    scores = torch.linspace(0.05, 0.95, 91)
    losses = [float(quality_focal_loss(torch.logit(s).reshape(1, 1, 1), batch, query, labels, torch.tensor([0.7]),
                                       0.25, 2.0)) for s in scores]
    assert abs(float(scores[int(torch.tensor(losses).argmin())]) - 0.7) < 0.011


def test_paired_overlap_is_the_matrix_diagonal():
    torch.manual_seed(1)
    xs_a, xs_b = torch.rand(4, 12), torch.rand(4, 12)
    xs_b[0] = xs_a[0] + 0.002  # one close pair
    vis_a, vis_b = torch.rand(4, 12) > 0.2, torch.rand(4, 12) > 0.2
    half = row_half_widths(xs_b, vis_b, (192, 384))
    matrix = lane_overlap_iou(xs_a, vis_a, xs_b, vis_b, half)
    torch.testing.assert_close(paired_lane_overlap_iou(xs_a, vis_a, xs_b, vis_b, half), matrix.diagonal())
    assert float(matrix[0, 0]) > 0.5


def _lane(x0: float, slope: float, rows: int = 12) -> torch.Tensor:
    return x0 + slope * torch.linspace(0, 1, rows)


def test_criterion_targets_the_fit_of_each_positive():
    """Queries on a labelled lane are class positives with their overlap as target: a query 0.5 cell off the lane
    is taught a lower score than one on it, and the loss falls as its score moves to that overlap."""
    rows = 12
    lane = _lane(0.4, 0.2, rows)
    targets = [{"labels": torch.zeros(1, dtype=torch.int64), "points": lane[None], "visible": torch.ones(1, rows,
                dtype=torch.bool)}]
    targets[0]["half_width"] = row_half_widths(targets[0]["points"], targets[0]["visible"], (192, 384))
    points = torch.stack([lane, lane + 0.006, torch.full((rows,), 0.9)])[None]  # on it, a little off, elsewhere
    pred = {"logits": torch.zeros(1, 3, 1, requires_grad=True), "points": points,
            "visibility": torch.full((1, 3, rows), 5.0)}
    criterion = LaneCriterion(one_to_many_iou=0.3, quality_targets="all")
    quality = criterion.fit_quality(pred, torch.tensor([0, 0]), torch.tensor([0, 1]),
                                    {k: v.expand(2, *v.shape[1:]) for k, v in targets[0].items()})
    assert float(quality[0]) == pytest.approx(1.0)
    assert 0.3 < float(quality[1]) < 0.9
    losses = criterion.prefix_losses(pred, targets, num_targets=1)
    losses["lane_cls"].backward()
    grad = pred["logits"].grad[0, :, 0]
    assert grad[0] < 0 and grad[1] < 0 and grad[2] > 0  # both positives pulled up from 0.5, the stray one down
    binary = LaneCriterion(one_to_many_iou=0.3).prefix_losses(pred, targets, num_targets=1)["lane_cls"]
    assert float(losses["lane_cls"].detach()) < float(binary.detach())  # a positive at 0.5 is nearer its quality than 1


def test_config_needs_one_to_many():
    from perception.config import load_config, parse_config

    cfg = load_config("configs/demo_synthetic.py")
    cfg.merge_from_dict({"matcher.lane_one_to_many_iou": None, "postprocess.lane_nms_iou": None,
                         "matcher.lane_quality_targets": "all"})
    with pytest.raises(ConfigError, match="lane_quality_targets"):
        parse_config(cfg)


def test_one_to_many_mode_keeps_the_hungarian_match_at_one():
    """quality_targets="one_to_many": the matched query is pushed towards 1 as with binary targets, the other query
    on the lane only towards its overlap."""
    rows = 12
    lane = _lane(0.4, 0.2, rows)
    targets = [{"labels": torch.zeros(1, dtype=torch.int64), "points": lane[None], "visible": torch.ones(1, rows,
                dtype=torch.bool)}]
    targets[0]["half_width"] = row_half_widths(targets[0]["points"], targets[0]["visible"], (192, 384))
    points = torch.stack([lane, lane + 0.006])[None]
    logits = torch.tensor([[[2.0], [2.0]]])  # both at p = 0.88, above the off query's overlap
    pred = {"logits": logits.clone().requires_grad_(), "points": points, "visibility": torch.full((1, 2, rows), 5.0)}
    LaneCriterion(one_to_many_iou=0.3, quality_targets="one_to_many").prefix_losses(
        pred, targets, num_targets=1)["lane_cls"].backward()
    grad = pred["logits"].grad[0, :, 0]
    assert grad[0] < 0 < grad[1]  # the match (query 0, on the lane) up towards 1, the near miss down to its overlap
    with pytest.raises(ValueError, match="quality_targets"):
        LaneCriterion(one_to_many_iou=0.3, quality_targets="yes")
