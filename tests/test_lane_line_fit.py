"""The robust straight-line fit of decoded lanes (postprocess.lane_line_fit_px): rows that jumped to a
neighbouring marking are pulled back onto the line the other rows agree on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.core.lane_coding import anchor_rows
from perception.postprocess.lane_fit import robust_line_fit
from perception.postprocess.lanes import decode_lanes

INPUT_SIZE = (224, 448)
NUM_POINTS = 24


def straight_lane(rows: np.ndarray) -> np.ndarray:
    return np.stack([100.0 + 0.8 * rows, rows], axis=1)  # x = 100 + 0.8 y, input px


def test_a_kinked_row_is_pulled_back_onto_the_line_of_the_others():
    rows = anchor_rows(NUM_POINTS, INPUT_SIZE[0])[8:]
    truth = straight_lane(rows)
    kinked = truth.copy()
    kinked[3:6, 0] += 25.0  # three rows snapped to the next marking, 25 px away
    fitted = robust_line_fit(kinked, huber_scale=2.7)
    # Ordinary least squares is pulled several px towards the jumped rows; Huber weights leave each of them
    # a bounded pull (the scale), so the line stays within the F1's ~2.7 px of the rows that agree.
    assert np.abs(fitted[:, 0] - truth[:, 0]).max() < 2.0
    np.testing.assert_array_equal(fitted[:, 1], kinked[:, 1])  # rows stay where they were
    plain = np.polyval(np.polyfit(rows, kinked[:, 0], 1), rows)
    assert np.abs(plain - truth[:, 0]).max() > 4.0  # the test case does separate robust from plain


def test_a_straight_lane_is_unchanged_and_short_lanes_are_left_alone():
    rows = anchor_rows(NUM_POINTS, INPUT_SIZE[0])
    truth = straight_lane(rows)
    np.testing.assert_allclose(robust_line_fit(truth, 2.7), truth, atol=1e-9)
    two = np.array([[10.0, 200.0], [30.0, 150.0]])
    np.testing.assert_array_equal(robust_line_fit(two, 2.7), two)
    with pytest.raises(ValueError, match="huber_scale"):
        robust_line_fit(truth, 0.0)


def test_decode_lanes_puts_each_lane_on_its_line_only_when_asked():
    rows = anchor_rows(NUM_POINTS, INPUT_SIZE[0])
    xs = (100.0 + 0.8 * rows) / INPUT_SIZE[1]
    xs[10] += 20.0 / INPUT_SIZE[1]  # one row off by 20 px
    outputs = {"lanes.logits": torch.tensor([[[5.0, -5.0]]]),
               "lanes.points": torch.as_tensor(xs, dtype=torch.float32)[None, None],
               "lanes.visibility": torch.full((1, 1, NUM_POINTS), 5.0)}
    identity = np.eye(3)
    raw = decode_lanes(outputs, 0, INPUT_SIZE, identity).polylines[0]
    fitted = decode_lanes(outputs, 0, INPUT_SIZE, identity, line_fit_px=2.7).polylines[0]
    line = 100.0 + 0.8 * fitted[:, 1]
    assert np.abs(raw[:, 0] - line).max() > 19.0
    assert np.abs(fitted[:, 0] - line).max() < 0.5


def test_the_perspective_fit_keeps_a_curved_lane_that_the_line_straightens():
    """With a horizon the fit is x = a + b y + c / (y - h), the image of a lane curving on flat ground: it keeps
    such a lane (and its kinks are still pulled back), where the straight line misses it by tens of px."""
    horizon = 98.0
    rows = anchor_rows(NUM_POINTS, INPUT_SIZE[0])
    rows = rows[rows > horizon + 5]
    curve = np.stack([60.0 + 1.2 * (rows - horizon) + 900.0 / (rows - horizon), rows], axis=1)
    kinked = curve.copy()
    kinked[4:6, 0] += 25.0
    fitted = robust_line_fit(kinked, huber_scale=2.7, horizon_y=horizon)
    assert np.abs(fitted[:, 0] - curve[:, 0]).max() < 2.0
    assert np.abs(robust_line_fit(curve, 2.7)[:, 0] - curve[:, 0]).max() > 20.0
    three = curve[:3]
    np.testing.assert_array_equal(robust_line_fit(three, 2.7, horizon_y=horizon), three)  # no more rows than terms


def test_the_perspective_fit_needs_the_line_fit_and_a_row_inside_the_image():
    from perception.config import ConfigError, load_config, parse_config

    for options in ({"postprocess.lane_fit_horizon_row": 1.5},
                    {"postprocess.lane_fit_horizon_row": 0.4, "postprocess.lane_line_fit_px": None}):
        with pytest.raises(ConfigError, match="postprocess.lane_fit_horizon_row"):
            parse_config(load_config("configs/demo_synthetic.py", options))
    cfg = parse_config(load_config("configs/demo_synthetic.py", {"postprocess.lane_fit_horizon_row": 0.4375,
                                                                 "postprocess.lane_line_fit_px": 2.7}))
    assert cfg.postprocess.lane_fit_horizon_row == 0.4375
