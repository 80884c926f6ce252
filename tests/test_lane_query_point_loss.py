"""The lane head's L1 on the final decoder layer's points before the marking search
(model.heads.lanes.query_point_loss): that layer learns the lane's geometry itself instead of only through the
search's prior, and nothing of it reaches inference or the exported graph."""

import pytest
import torch
from conftest import experiment_dict

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.losses.lane_loss import LaneCriterion
from perception.models.heads.lanes import LaneHead

ROWS = 12
LANE = torch.tensor([[20.0, 128.0], [60.0, 0.0]])  # input px of a 128x256 image: a slanted lane
TARGETS = {"lanes": {"valid": torch.tensor([True]), "input_size": (128, 256),
                     "per_image": [{"polylines": [LANE], "labels": torch.tensor([0])}]}}


def _head(query_point_loss: bool) -> LaneHead:
    torch.manual_seed(0)
    return LaneHead(16, dim=32, num_queries=6, num_points=ROWS, num_layers=2, ffn_dim=64, marking_refinement=True,
                    marking_search="kernel", marking_channels=16, query_point_loss=query_point_loss)


def _with_painted_lane(head: LaneHead) -> LaneHead:
    """The head's marking map replaced by one sure of the lane on every row (a trained map on painted rows): the
    search then puts the final points on the paint wherever the decoder put them."""
    computed = head.marking.forward

    def painted(stride4: torch.Tensor):
        _, features = computed(stride4)
        height, width = stride4.shape[-2:]
        marking = torch.full((stride4.shape[0], 1, height, width), -10.0)
        for row in range(height):
            y = (row + 0.5) / height * 128
            marking[:, 0, row, int((20.0 + 40.0 * (128.0 - y) / 128.0) / 256 * width)] = 10.0
        return marking, features

    head.marking.forward = painted
    return head


def _levels() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]


def _truth_x() -> torch.Tensor:
    """The lane's x at the head's rows, normalised by the width [ROWS] (the whole lane is visible)."""
    row_y = (torch.arange(ROWS, dtype=torch.float32) + 0.5) / ROWS * 128
    return (20.0 + (60.0 - 20.0) * (128.0 - row_y) / 128.0) / 256


def _decoder_error_after_training(query_point_loss: bool, steps: int = 40) -> float:
    """Mean |x - truth| (input px) of the final decoder layer's points, before the search, of the query nearest the
    lane after ``steps`` Adam steps on one image whose lane the marking map finds on every row."""
    head, levels = _with_painted_lane(_head(query_point_loss)), _levels()
    criterion = LaneCriterion(row_classification=True)
    optimiser = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(steps):
        losses = criterion(head(levels), TARGETS, head=head)
        optimiser.zero_grad()
        sum(losses.values()).backward()
        optimiser.step()
    head.query_point_loss = True  # read the points before the search in both runs
    with torch.no_grad():
        before_search = head(levels)["lanes.query_points"][0]  # (Q, P)
    return ((before_search - _truth_x()).abs().mean(-1).min() * 256).item()


def test_the_final_decoder_layer_learns_the_lane_with_its_own_l1():
    with_loss, without = _decoder_error_after_training(True), _decoder_error_after_training(False)
    assert with_loss < 0.5 * without, (with_loss, without)


def test_the_points_before_the_search_are_a_training_output_only():
    head, levels = _head(True), _levels()
    outputs = head(levels)
    assert outputs["lanes.query_points"].shape == outputs["lanes.points"].shape == (1, 6, ROWS)
    assert not torch.equal(outputs["lanes.query_points"], outputs["lanes.points"])  # the search moved them
    head.eval()
    assert "lanes.query_points" not in head(levels)  # inference and export see the head unchanged
    assert "lanes.query_points" not in _head(False).train()(levels)


def test_the_points_before_the_search_add_their_l1_to_lane_points():
    head, levels, criterion = _head(True), _levels(), LaneCriterion(row_classification=True)
    outputs = head(levels)
    with_loss = criterion(outputs, TARGETS, head=head)["lane_points"]
    outputs["lanes.query_points"] = outputs["lanes.points"]  # the same points twice: the final layer's L1 doubles
    doubled = criterion(outputs, TARGETS, head=head)["lane_points"]
    del outputs["lanes.query_points"]
    without = criterion(outputs, TARGETS, head=head)["lane_points"]
    assert with_loss > without
    final_layer_l1 = doubled - without
    assert final_layer_l1 > 0
    assert without - final_layer_l1 > 0  # the earlier layers, proposals and dense tokens keep theirs


def test_the_query_point_loss_needs_the_marking_search():
    with pytest.raises(ConfigError, match="query_point_loss"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(query_point_loss=True)))))
    parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
        query_point_loss=True, marking_refinement=True, marking_search="kernel")))))
