"""One-to-many class targets for the lane head (matcher.lane_one_to_many_iou) and lane NMS (postprocess.lane_nms_iou).

Both read the lane overlap at the row anchors (perception.core.lane_overlap), which stands in for the F1's mask IoU
(lines 30 px wide at 1640 px): a query whose lane the metric would count is a class positive even when another
query won the Hungarian match, and post-processing keeps one lane of each group of duplicates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.config import ConfigError
from perception.core.lane_coding import anchor_rows, encode_lane
from perception.core.lane_overlap import lane_overlap_iou, row_half_widths
from perception.losses.lane_loss import LaneCriterion, overlapping_lanes
from perception.metrics.lanes import lane_iou_matrix
from perception.postprocess.lanes import decode_lanes

INPUT_SIZE = (224, 448)  # (H, W), the demo's input
NUM_POINTS = 24
ROWS = anchor_rows(NUM_POINTS, INPUT_SIZE[0])


def lane(x_bottom: float, dx_per_row: float, top_row: float = 100.0) -> np.ndarray:
    """A straight polyline (input px) from the image bottom up to ``top_row``, bottom first."""
    ys = np.linspace(INPUT_SIZE[0] - 1.0, top_row, 40)
    return np.stack([x_bottom + dx_per_row * (INPUT_SIZE[0] - 1.0 - ys), ys], axis=1)


def encoded(polylines: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """x [L,P] normalised by the width and visible [L,P], as the loss and the decoder see lanes."""
    pairs = [encode_lane(p, ROWS, INPUT_SIZE[1]) for p in polylines]
    xs = torch.tensor(np.array([x / INPUT_SIZE[1] for x, _ in pairs]), dtype=torch.float64)
    return xs, torch.tensor(np.array([v for _, v in pairs]))


def row_iou(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    xa, va = encoded(a)
    xb, vb = encoded(b)
    return lane_overlap_iou(xa, va, xb, vb, row_half_widths(xb, vb, INPUT_SIZE)).numpy()


def test_the_row_overlap_follows_the_f1s_mask_iou():
    truth = [lane(200.0, 0.0), lane(250.0, 1.2), lane(120.0, -2.5, top_row=150.0)]
    # Per true lane: itself, shifted by 1, 2 and 4 px (the F1's 30 px at 1640 are 8.2 px at 448), and shortened.
    cases = []
    for polyline in truth:
        cases += [polyline, polyline + [1.0, 0.0], polyline + [2.0, 0.0], polyline + [4.0, 0.0],
                  polyline[: len(polyline) // 2]]
    size = (INPUT_SIZE[1], INPUT_SIZE[0])  # the metric's (width, height)
    mask = lane_iou_matrix(cases, truth, size)
    rows = row_iou(cases, truth)
    assert np.abs(rows - mask).max() < 0.12, np.round(rows - mask, 2)
    assert ((rows >= 0.5) == (mask >= 0.5)).mean() >= 0.95
    np.testing.assert_allclose(np.diag(row_iou(truth, truth)), 1.0)
    assert row_iou([lane(200.0, 0.0)], [lane(230.0, 0.0)])[0, 0] == 0.0  # 30 px apart: nothing in common


def test_a_slanted_lane_keeps_its_width_across_the_rows():
    # At 2.5 px per row a 1-px horizontal shift is a small part of the line's horizontal cross-section, so the
    # overlap stays high; without the slant widening it would be measured against the vertical line's width.
    steep, slanted = lane(200.0, 0.0), lane(200.0, 2.5, top_row=150.0)
    assert row_iou([slanted + [3.0, 0.0]], [slanted])[0, 0] > row_iou([steep + [3.0, 0.0]], [steep])[0, 0] + 0.2


def _lane_targets(polylines: list[np.ndarray], labels: list[int]) -> dict:
    return {"lanes": {"valid": torch.tensor([True]), "input_size": INPUT_SIZE,
                      "per_image": [{"polylines": [torch.tensor(p, dtype=torch.float32) for p in polylines],
                                     "labels": torch.tensor(labels)}]}}


TRUTH = [lane(200.0, 0.0), lane(300.0, 1.0)]


def _queries() -> tuple[torch.Tensor, torch.Tensor]:
    """Query 0 on lane 0, query 1 a 1-px duplicate of it, query 2 on lane 1, query 3 far from both."""
    xs, visible = encoded([TRUTH[0], TRUTH[0] + [1.0, 0.0], TRUTH[1], lane(60.0, 0.0)])
    visibility_logits = torch.where(visible, 5.0, -5.0)
    return xs.float()[None], visibility_logits.float()[None]


def test_queries_that_fit_a_lane_are_labelled_as_the_lane_they_overlap_most():
    points, visibility = _queries()
    encoded_targets = LaneCriterion(one_to_many_iou=0.5).encode(_lane_targets(TRUTH, [1, 0])["lanes"]["per_image"],
                                                                INPUT_SIZE, {"lanes.points": points}, "cpu")
    image, query, label, _ = overlapping_lanes(points, visibility, encoded_targets, 0.5)
    assert image.tolist() == [0, 0, 0] and query.tolist() == [0, 1, 2] and label.tolist() == [1, 1, 0]
    # Rows the head does not draw do not count: query 2 drawn on its top half only no longer fits lane 1.
    visibility[0, 2, NUM_POINTS // 2:] = -5.0
    _, query, _, _ = overlapping_lanes(points, visibility, encoded_targets, 0.5)
    assert query.tolist() == [0, 1]


@pytest.mark.parametrize("one_to_many", [None, 0.5])
def test_a_duplicate_lane_is_pushed_down_only_without_one_to_many(one_to_many):
    criterion = LaneCriterion(dense_weight=0.0, one_to_many_iou=one_to_many)
    points, visibility = _queries()
    logits = torch.zeros(1, 4, 2, requires_grad=True)
    points.requires_grad_(True)
    pred = {"logits": logits, "points": points, "visibility": visibility}
    targets = criterion.encode(_lane_targets(TRUTH, [1, 0])["lanes"]["per_image"], INPUT_SIZE, {"lanes.points": points},
                               "cpu")
    losses = criterion.prefix_losses(pred, targets, num_targets=2)
    (losses["lane_cls"] + losses["lane_points"]).backward()
    grad = logits.grad[0]
    assert grad[0, 1] < 0 and grad[2, 0] < 0 and grad[3, 1] > 0  # the matches up, the far query down
    assert (grad[1, 1] < 0) if one_to_many else (grad[1, 1] > 0)  # the duplicate: up only with one-to-many
    assert points.grad[0, 1].abs().sum() == 0  # its rows are not regressed either way (one-to-one)


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_one_to_many_regression_pulls_a_duplicate_onto_its_lane_only_when_on(weight):
    criterion = LaneCriterion(dense_weight=0.0, one_to_many_iou=0.5, one_to_many_regression=weight)
    points, visibility = _queries()
    points.requires_grad_(True)
    pred = {"logits": torch.zeros(1, 4, 2), "points": points, "visibility": visibility}
    targets = criterion.encode(_lane_targets(TRUTH, [1, 0])["lanes"]["per_image"], INPUT_SIZE, {"lanes.points": points},
                               "cpu")
    losses = criterion.prefix_losses(pred, targets, num_targets=2)
    losses["lane_points"].backward()
    duplicate = points.grad[0, 1]  # query 1: 1 px right of lane 0 on every row
    if weight:
        assert (duplicate[duplicate != 0] > 0).all() and duplicate.abs().sum() > 0  # pulled left, onto lane 0
    else:
        assert duplicate.abs().sum() == 0
    assert points.grad[0, 3].abs().sum() == 0  # the query far from both lanes is never regressed
    # The matches sit on their lanes (up to float rounding), so only the duplicate's 1-px error counts, averaged
    # over the 3 one-to-many queries.
    one_px = 1.0 / INPUT_SIZE[1]
    assert losses["lane_points"].item() == pytest.approx(weight * one_px / 3, rel=1e-3, abs=1e-6)


def _outputs(scores: list[float]) -> dict[str, torch.Tensor]:
    points, visibility = _queries()
    logit = torch.logit(torch.tensor(scores))
    return {"lanes.logits": torch.stack([logit, torch.full_like(logit, -9.0)], dim=-1)[None],
            "lanes.points": points, "lanes.visibility": visibility}


def test_lane_nms_keeps_one_of_each_group_of_duplicates():
    outputs = _outputs([0.7, 0.9, 0.8, 0.6])  # the duplicate (query 1) scores higher than the query it copies
    identity = np.eye(3)
    plain = decode_lanes(outputs, 0, INPUT_SIZE, identity, score_threshold=0.3)
    assert len(plain.polylines) == 4
    kept = decode_lanes(outputs, 0, INPUT_SIZE, identity, score_threshold=0.3, nms_iou=0.5)
    np.testing.assert_allclose(kept.scores, [0.9, 0.8, 0.6], rtol=1e-6)  # query 0 goes, the distinct lanes stay
    np.testing.assert_allclose(kept.polylines[0], plain.polylines[0])  # the best-scored copy is the one kept


def test_config_checks_the_lane_thresholds_and_builds_the_criterion():
    from conftest import experiment_dict

    from perception.config import parse_config
    from perception.tasks.lanes import LANES

    with pytest.raises(ConfigError, match="matcher.lane_one_to_many_iou"):
        parse_config(experiment_dict("unused", matcher={"lane_one_to_many_iou": 1.5}))
    with pytest.raises(ConfigError, match="postprocess.lane_nms_iou"):
        parse_config(experiment_dict("unused", postprocess={"lane_nms_iou": 0.0}))
    # iou_aware_classification is a box-head option: it does not conflict with the lanes' one-to-many targets.
    cfg = parse_config(experiment_dict("unused", matcher={"lane_one_to_many_iou": 0.5,
                                                          "iou_aware_classification": True}))
    assert LANES.build_criterion(cfg).one_to_many_iou == 0.5
    assert LANES.build_criterion(parse_config(experiment_dict("unused"))).one_to_many_iou is None
