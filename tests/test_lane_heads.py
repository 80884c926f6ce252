"""Lane row-anchor coding, the lane and light heads' outputs, and the lane matcher."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.core.lane_coding import anchor_rows, decode_lane, encode_lane
from perception.core.light_states import LIGHT_STATES
from perception.losses.lane_loss import LaneCriterion, LaneMatcher
from perception.models.heads.lanes import LaneHead
from perception.models.heads.lights import LightHead


def test_encode_intersects_rows_and_marks_visibility():
    rows = anchor_rows(8, 160.0)  # 10, 30, ..., 150
    lane = np.array([[100.0, 160.0], [20.0, 0.0]])  # x = 100 - (160 - y) / 2
    xs, visible = encode_lane(lane, rows, width=200.0)
    assert visible.all()
    assert np.allclose(xs, 100 - (160 - rows) / 2)
    # The same lane leaving the image on the left: rows where x < 0 are not visible.
    xs, visible = encode_lane(np.array([[10.0, 160.0], [-70.0, 0.0]]), rows, width=200.0)
    assert visible.tolist() == [False] * 7 + [True]  # x = 10 - (160 - y) / 2 >= 0 only at y = 150
    # A short lane covers only the rows it crosses; decoding returns those points, bottom first.
    xs, visible = encode_lane(np.array([[50.0, 100.0], [50.0, 60.0]]), rows, width=200.0)
    assert np.flatnonzero(visible).tolist() == [3, 4]
    polyline = decode_lane(xs / 200.0, visible, (160, 200))
    assert np.allclose(polyline, [[50.0, 90.0], [50.0, 70.0]])


def test_heads_return_the_documented_outputs():
    levels = [torch.randn(2, 16, 56 // 2 ** i, 112 // 2 ** i) for i in range(4)]
    lanes, lights = LaneHead(16, num_points=12, dim=32, num_queries=7), LightHead(16, dim=32, num_queries=9)
    for head in (lanes, lights):
        head.eval()
    out = lanes(levels) | lights(levels)
    assert out["lanes.logits"].shape == (2, 7, 2)
    assert out["lanes.points"].shape == (2, 7, 12) and out["lanes.visibility"].shape == (2, 7, 12)
    assert out["lights.logits"].shape == (2, 9, len(LIGHT_STATES)) and out["lights.boxes"].shape == (2, 9, 4)
    assert not any(".aux" in k or ".enc" in k for k in out)  # auxiliary outputs only in training
    lanes.train()
    assert {"lanes.enc.points", "lanes.aux0.points"} <= set(lanes(levels))


def test_lane_matcher_pairs_each_lane_with_its_nearest_query():
    num_points = 6
    points = torch.full((1, 4, num_points), 0.9)
    points[0, 2] = 0.2  # query 2 sits on lane 0
    points[0, 0] = 0.6  # query 0 sits on lane 1
    logits = torch.zeros(1, 4, 2)
    targets = [{"labels": torch.tensor([0, 1]), "points": torch.stack([torch.full((6,), 0.21), torch.full((6,), 0.6)]),
                "visible": torch.ones(2, num_points, dtype=torch.bool)}]
    (queries, lanes), = LaneMatcher()(logits, points, targets)
    assert dict(zip(lanes.tolist(), queries.tolist())) == {0: 2, 1: 0}
    empty = [{"labels": torch.zeros(0, dtype=torch.int64), "points": torch.zeros(0, num_points),
              "visible": torch.zeros(0, num_points, dtype=torch.bool)}]
    assert [len(q) for q, _ in LaneMatcher()(logits, points, empty)] == [0]


def test_lane_targets_drop_lanes_crossing_too_few_rows():
    steep, flat = torch.tensor([[10.0, 224.0], [200.0, 0.0]]), torch.tensor([[0.0, 200.0], [440.0, 203.0]])
    per_image = [{"polylines": [steep, flat], "labels": torch.tensor([0, 1])}]
    encoded, = LaneCriterion.encode_targets(per_image, (224, 448), 24, "cpu")
    assert encoded["labels"].tolist() == [0]  # the near-horizontal one crosses at most one row
    assert encoded["points"].shape == (1, 24) and bool(encoded["visible"].all())
    assert encoded["points"][0, -1].item() == pytest.approx((10 + 190 * (224 - 219.33) / 224) / 448, abs=1e-3)


def test_lane_targets_and_masks_of_a_batch_equal_those_of_each_image_alone():
    """The lane criterion brings a batch's polylines, labels and encoded lanes to the host in one copy each
    (a copy per image waits for the accelerator each time): the results must be each image's own, whether
    the polylines are tensors (moved with the batch) or arrays, including an image without lanes."""
    from perception.losses.lane_loss import lane_masks

    generator = torch.Generator().manual_seed(0)
    per_image = []
    for count in (3, 0, 2):
        polylines = [torch.stack([torch.rand(4, generator=generator) * 448,
                                  torch.linspace(223.0, 80.0, 4)], dim=1) for _ in range(count)]
        per_image.append({"polylines": polylines, "labels": torch.randint(0, 2, (count,), generator=generator)})
    batch = LaneCriterion.encode_targets(per_image, (224, 448), 24, "cpu")
    as_arrays = [{"polylines": [p.numpy() for p in t["polylines"]], "labels": t["labels"]} for t in per_image]
    for encoded in (batch, LaneCriterion.encode_targets(as_arrays, (224, 448), 24, "cpu")):
        for i, target in enumerate(per_image):
            alone, = LaneCriterion.encode_targets([target], (224, 448), 24, "cpu")
            assert all(torch.equal(encoded[i][key], alone[key]) for key in alone)
    assert [len(t["labels"]) for t in batch] == [3, 0, 2]
    masks = lane_masks(batch, 56, 112, "cpu")
    assert masks[1].sum() == 0 and masks[0].sum() > 0
    for i in range(3):
        assert torch.equal(masks[i:i + 1], lane_masks(batch[i:i + 1], 56, 112, "cpu"))


def test_perspective_term_bends_proposals_through_their_token_and_fits_curved_lanes():
    """horizon_row adds c / (y - h) to the lane's basis: proposals still pass through their token (the term is 0 at
    the token's row), start as the cubic (zero-initialised), and the basis fits the image of a curve on flat ground,
    x = a (y - h) + b + c / (y - h), exactly where the cubic alone cannot."""
    from perception.models.heads.lanes import perspective_term, row_basis

    torch.manual_seed(0)
    horizon = 0.4375
    head = LaneHead(16, dim=32, num_queries=4, num_layers=1, levels=(0, 1), horizon_row=horizon).eval()
    plain = LaneHead(16, dim=32, num_queries=4, num_layers=1, levels=(0, 1)).eval()
    assert head.basis.shape == (24, 5) and plain.basis.shape == (24, 4)
    tokens = torch.randn(1, 6, 32)
    anchors = torch.tensor([[[0.3, 0.6, 0.1, 0.1], [0.7, 0.9, 0.1, 0.1], [0.5, 0.5, 0.1, 0.1],
                             [0.2, 0.75, 0.1, 0.1], [0.8, 0.46, 0.1, 0.1], [0.4, 0.98, 0.1, 0.1]]])
    torch.testing.assert_close(head.propose(tokens, anchors), anchors[..., :1].expand(1, 6, 24))  # zero-initialised
    with torch.no_grad():
        head.enc_points.layers[-1].bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.3]))
    proposals = head.propose(tokens, anchors)  # (1, 6, P): a pure perspective curve through each token
    expected = anchors[..., :1] + 0.3 * (perspective_term(head.row_y, horizon) - perspective_term(anchors[..., 1:2],
                                                                                                   horizon))
    torch.testing.assert_close(proposals, expected)
    through_token = np.interp(0.75, head.row_y.numpy(), proposals[0, 3].detach().numpy())  # a far-from-h token
    assert through_token == pytest.approx(0.2, abs=0.01)
    assert perspective_term(torch.tensor([0.2]), horizon).item() == pytest.approx(0.05 / 0.02)  # clamped above h

    rows = head.row_y.double()
    below = rows > horizon + 0.04  # rows a lane can be seen on
    curve = 0.4 * (rows - horizon) + 0.3 + 0.004 / (rows - horizon)  # x of a lane curving on flat ground
    for basis, exact in ((head.basis.double(), True), (row_basis(24).double(), False)):
        coef = torch.linalg.lstsq(basis[below], curve[below, None]).solution
        error = (basis[below] @ coef).squeeze(1) - curve[below]
        assert (error.abs().max() < 1e-6) == exact


def test_horizon_row_out_of_range_is_a_config_error():
    from perception.config import ConfigError, load_config, parse_config

    with pytest.raises(ConfigError, match="model.heads.lanes.horizon_row"):
        parse_config(load_config("configs/demo_synthetic.py", {"model.heads.lanes.horizon_row": 1.2}))
