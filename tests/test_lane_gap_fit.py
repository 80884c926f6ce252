"""The lane head's gap fit (model.heads.lanes.gap_fit; lane_marking.fit_through_gaps): corrections the row search
finds on painted rows, fitted as offset + slope, move the rows in a dashed marking's gaps too."""

import math

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.export.graph_checks import FORBIDDEN_OPS
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.losses.lane_loss import LaneCriterion
from perception.models.heads.lane_marking import fit_through_gaps, locate_on_rows, search_rows
from perception.models.heads.lanes import LaneHead

WIDTH, HEIGHT, ROWS = 64, 24, 12
ROW_Y = (torch.arange(ROWS, dtype=torch.float32) + 0.5) / ROWS
PAINTED = torch.tensor([1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0], dtype=torch.bool)  # a dash, a gap, a dash, a gap


def _dashed_lane(slope_cells: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A map [1,1,h,w] firing on a lane at cell 30 (+ slope x t, t = 2y - 1) on the painted rows only, and its
    true x [ROWS] (normalised) on every row."""
    marking = torch.full((1, 1, HEIGHT, WIDTH), -8.0)
    true_cells = 30.0 + slope_cells * (ROW_Y * 2 - 1)
    for row, (y, painted) in enumerate(zip(ROW_Y, PAINTED)):
        map_row = int(y * HEIGHT)
        if painted:
            marking[0, 0, map_row - 1:map_row + 1, int(round(true_cells[row].item()))] = 8.0  # rows either side of y
    return marking, (true_cells + 0.5) / WIDTH


@pytest.mark.parametrize("slope_cells", [0.0, 3.0])
def test_gap_rows_follow_the_painted_rows_and_the_row_search_alone_leaves_them(slope_cells):
    marking, truth = _dashed_lane(slope_cells)
    decoder_x = (truth - 2.5 / WIDTH).expand(1, 1, ROWS)  # the decoder's lane: 2.5 cells left of the paint
    log_sigma, stay = torch.tensor(math.log(4.0)), torch.tensor(0.0)
    plain = locate_on_rows(decoder_x, ROW_Y, marking, log_sigma, stay)[0, 0]
    found, evidence = search_rows(decoder_x, ROW_Y, marking, log_sigma, stay)
    fitted = fit_through_gaps(decoder_x, found, evidence, ROW_Y)[0, 0]
    assert (evidence[0, 0, PAINTED] > 0.9).all() and (evidence[0, 0, ~PAINTED] < 0.1).all()
    cells = lambda x: (x - truth).abs() * WIDTH  # noqa: E731
    assert (cells(plain)[PAINTED] < 0.3).all() and (cells(plain)[~PAINTED] > 2.0).all()  # the gaps stay put
    assert (cells(fitted)[PAINTED] < 0.3).all()
    # Left: the ridge's pull towards no correction (about ridge / (ridge + rows of paint) of it) and, with a slope,
    # the paint's rounding to whole cells (up to 0.25 here) extrapolated past the last dash.
    assert (cells(fitted)[~PAINTED] < 0.65).all(), cells(fitted)


def test_a_lane_without_paint_keeps_its_decoder_x():
    marking = torch.full((1, 1, HEIGHT, WIDTH), -8.0)
    decoder_x = torch.full((1, 2, ROWS), 0.4)
    found, evidence = search_rows(decoder_x, ROW_Y, marking, torch.tensor(math.log(4.0)), torch.tensor(0.0))
    fitted = fit_through_gaps(decoder_x, found, evidence, ROW_Y)
    assert (fitted - decoder_x).abs().max() < 0.2 / WIDTH


def test_lane_head_with_the_gap_fit_trains_and_exports_with_tensorrt_ops(tmp_path):
    torch.manual_seed(0)
    head = LaneHead(16, dim=32, num_queries=6, num_points=ROWS, num_layers=2, ffn_dim=64,
                    marking_refinement=True, marking_search="row", gap_fit=True, marking_channels=16)
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    lane = torch.tensor([[20.0, 128.0], [28.0, 0.0]])  # input px of a 128x256 image
    targets = {"lanes": {"valid": torch.tensor([True]), "input_size": (128, 256),
                         "per_image": [{"polylines": [lane], "labels": torch.tensor([0])}]}}
    criterion = LaneCriterion()
    optimiser = torch.optim.Adam(head.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        losses = criterion(head(levels), targets, head=head)
        first = first if first is not None else losses["lane_points"].item()
        optimiser.zero_grad()
        sum(losses.values()).backward()
        assert head.stay_logit.grad is not None and head.stay_logit.grad.abs() > 0
        optimiser.step()
    assert losses["lane_points"].item() < 0.5 * first, (first, losses["lane_points"].item())

    head.eval()
    outputs = head(levels)

    ops, (points, _) = export_head(head, levels, ["lanes.points", "lanes.logits"], str(tmp_path / "lanes.onnx"))
    assert not ops & FORBIDDEN_OPS - {"Shape"} and "GridSample" in ops
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING
    assert np.abs(points - outputs["lanes.points"].detach().numpy()).max() < 1e-4


def test_the_gap_fit_needs_the_row_search():
    with pytest.raises(ConfigError, match="gap_fit"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(gap_fit=True)))))
    with pytest.raises(ConfigError, match="gap_fit"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
            gap_fit=True, marking_refinement=True, marking_search="kernel")))))
    parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
        gap_fit=True, marking_refinement=True, marking_search="row")))))
