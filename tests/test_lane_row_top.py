"""Anchor rows that start below the top of the input (model.heads.lanes.row_top): every part that places a lane's
rows in the image (coding, the head's sampling rows, the dense assignment, the metric-width overlap, decoding and
the config that carries the value to decoding) agrees on where they are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.config import load_config, parse_config
from perception.core.errors import ConfigError
from perception.core.lane_coding import anchor_rows, decode_lane, encode_lane, row_spacing
from perception.core.lane_overlap import row_half_widths
from perception.losses.dense_assign import lane_candidates
from perception.models.heads.lanes import LaneHead
from perception.postprocess.lanes import decode_lanes

INPUT_SIZE = (224, 448)


def test_rows_fill_the_height_below_top():
    rows = anchor_rows(8, 200.0, top=0.5)  # 8 rows over y in [100, 200]: 106.25, 118.75, ..., 193.75
    assert np.allclose(rows, 100.0 + (np.arange(8) + 0.5) * 12.5)
    assert row_spacing(8, 200.0, 0.5) == 12.5
    assert np.allclose(anchor_rows(8, 160.0), (np.arange(8) + 0.5) * 20.0)  # default: the whole height


def test_encode_decode_round_trip_with_row_top():
    rows = anchor_rows(6, 224.0, top=0.4)
    lane = np.array([[300.0, 224.0], [200.0, 100.0]])  # a straight lane from the bottom to just below the horizon
    xs, visible = encode_lane(lane, rows, width=448.0)
    assert visible.all()
    polyline = decode_lane(xs / 448.0, visible, INPUT_SIZE, row_top=0.4)
    assert np.allclose(polyline[:, 1], rows[::-1])  # bottom first, at the rows
    assert np.allclose(polyline[:, 0], 300.0 - (224.0 - rows[::-1]) * 100.0 / 124.0)


def test_head_samples_the_image_at_its_rows():
    head = LaneHead(16, num_points=12, dim=32, num_queries=5, row_top=0.42)
    assert torch.allclose(head.row_y, torch.as_tensor(anchor_rows(12, 1.0, 0.42), dtype=torch.float32))
    assert head.row_y.min() > 0.42


def test_dense_candidates_use_the_rows_and_skip_tokens_above_them():
    # One vertical lane at x = 0.5 crossing all 4 rows that start at 0.5 of the height (y = 0.5625 ... 0.9375).
    gt_points, gt_visible = torch.full((1, 4), 0.5), torch.ones(1, 4, dtype=torch.bool)
    gt_visible[0, 0] = False  # not on the first row
    anchors = torch.tensor([[0.5, 0.3, 0.1, 0.1],  # above the rows: never a candidate
                            [0.5, 0.56, 0.1, 0.1],  # on row 0, where the lane is not visible
                            [0.5, 0.70, 0.1, 0.1],  # on row 1
                            [0.9, 0.70, 0.1, 0.1]])  # on row 1, far from the lane
    near = lane_candidates(anchors, [], gt_points, gt_visible, cell=torch.full((4,), 0.1), row_top=0.5)
    assert near[:, 0].tolist() == [False, False, True, False]


def test_metric_width_follows_the_row_spacing():
    """The same slanted image line at rows over the whole height or over its lower half: the slope in pixels, and
    so the per-row half-width the F1's 30-px line covers, is the same."""
    height, width = INPUT_SIZE
    widths = []
    for top in (0.0, 0.5):
        rows = anchor_rows(8, float(height), top)
        xs = torch.as_tensor((100.0 + 0.8 * rows) / width, dtype=torch.float64)[None]  # dx/dy = 0.8 px/px
        widths.append(row_half_widths(xs, torch.ones_like(xs, dtype=torch.bool), INPUT_SIZE, top))
    assert torch.allclose(widths[0], widths[1])


def test_decoding_places_lanes_at_the_rows():
    points = torch.full((1, 1, 6), 0.5)
    outputs = {"lanes.logits": torch.full((1, 1, 2), 5.0), "lanes.points": points,
               "lanes.visibility": torch.full((1, 1, 6), 5.0)}
    lane = decode_lanes(outputs, 0, INPUT_SIZE, np.eye(3), row_top=0.5).polylines[0]
    assert np.allclose(lane[:, 1], anchor_rows(6, 224.0, 0.5)[::-1])


def test_config_carries_row_top_to_decoding_and_rejects_a_second_value():
    cfg = parse_config(load_config("configs/demo_synthetic.py", {"model.heads.lanes.row_top": 0.42}))
    assert cfg.postprocess.lane_row_top == 0.42
    with pytest.raises(ConfigError, match="lane_row_top"):
        parse_config(load_config("configs/demo_synthetic.py", {"model.heads.lanes.row_top": 0.42,
                                                               "postprocess.lane_row_top": 0.3}))
    with pytest.raises(ConfigError, match="row_top must be in"):
        parse_config(load_config("configs/demo_synthetic.py", {"model.heads.lanes.row_top": 1.0}))
