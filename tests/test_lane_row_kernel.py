"""Row-wise lane classification with query-conditioned kernels (lane_marking.classify_rows, lane_loss.
row_classification_loss, LaneHead(marking_search="kernel"))."""

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.export.graph_checks import FORBIDDEN_OPS
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.losses.lane_loss import ROW_CE_LOSS, LaneCriterion, row_classification_loss
from perception.models.heads.lane_marking import classify_rows
from perception.models.heads.lanes import LaneHead

WIDTH, HEIGHT, ROWS = 28, 14, 6
ROW_Y = (torch.arange(ROWS, dtype=torch.float32) + 0.5) / ROWS


def _two_markings(left_cell: float, right_cell: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A map [1,1,h,w] that fires equally on two vertical markings, and features [1,2,h,w]: channel 0 is 1 on
    the left marking's cell, channel 1 on the right one's (what tells a query's kernel which is its lane)."""
    marking = torch.full((1, 1, HEIGHT, WIDTH), -6.0)
    features = torch.zeros(1, 2, HEIGHT, WIDTH)
    for channel, cell in enumerate((left_cell, right_cell)):
        marking[..., int(cell)] = 6.0
        features[:, channel, :, int(cell)] = 1.0
    return marking, features


def test_row_loss_is_lowest_at_the_two_cell_label_and_ignores_hidden_rows():
    target = torch.tensor([[10.3 / WIDTH, 0.9]])  # cell coordinate 10.3 - 0.5 = 9.8: 20 % on cell 9, 80 % on 10
    visible = torch.tensor([[True, False]])

    def logits_at(probs: dict[int, float]) -> torch.Tensor:
        row = torch.full((WIDTH,), 1e-6)
        for cell, p in probs.items():
            row[cell] = p
        return row.log().expand(1, 2, WIDTH)

    exact = row_classification_loss(logits_at({9: 0.2, 10: 0.8}), target, visible)
    one_cell = row_classification_loss(logits_at({10: 1.0}), target, visible)
    shifted = row_classification_loss(logits_at({11: 0.2, 12: 0.8}), target, visible)
    entropy = -(0.2 * np.log(0.2) + 0.8 * np.log(0.8))
    assert exact.item() == pytest.approx(entropy, abs=1e-4)  # the minimum: the label's own entropy
    assert exact < one_cell < shifted
    # The hidden second row (x = 0.9) does not count: only row 0 is scored.
    assert row_classification_loss(logits_at({9: 0.2, 10: 0.8}), target, torch.tensor([[True, True]])) > exact


def test_the_query_kernel_picks_its_own_lane_over_a_nearer_marking():
    marking, features = _two_markings(left_cell=8, right_cell=16)
    start = torch.full((1, 2, ROWS), 10.5 / WIDTH)  # both queries nearer the left marking (2 vs 6 cells)
    log_sigma = torch.tensor(np.log(1.5), dtype=torch.float32)  # a prior of 1.5 cells: 2 cells cost 0.9, 6 cost 8
    kernels = torch.tensor([[[0.0, 0.0], [0.0, 12.0]]])  # query 0: no kernel; query 1: "my lane is the right one"
    x, logits = classify_rows(start, ROW_Y, marking, features, kernels, log_sigma)
    assert logits.shape == (1, 2, ROWS, WIDTH)
    cells = x * WIDTH - 0.5
    assert (cells[0, 0] - 8).abs().max() < 0.3, cells[0, 0]  # the prior alone: the nearer marking
    assert (cells[0, 1] - 16).abs().max() < 0.3, cells[0, 1]  # the kernel: its own marking, 6 cells away


def test_lane_head_with_row_kernels_trains_them_and_exports_without_the_row_logits(tmp_path):
    torch.manual_seed(0)
    head = LaneHead(16, dim=32, num_queries=6, num_points=ROWS, num_layers=2, ffn_dim=64,
                    marking_refinement=True, marking_search="kernel", marking_channels=16)
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    lane = torch.tensor([[20.0, 128.0], [28.0, 0.0]])  # input px of a 128x256 image
    targets = {"lanes": {"valid": torch.tensor([True]), "input_size": (128, 256),
                         "per_image": [{"polylines": [lane], "labels": torch.tensor([0])}]}}
    criterion = LaneCriterion(row_classification=True)
    assert ROW_CE_LOSS in criterion.loss_names
    optimiser = torch.optim.Adam(head.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        losses = criterion(head(levels), targets, head=head)
        first = first if first is not None else losses[ROW_CE_LOSS].item()
        optimiser.zero_grad()
        sum(losses.values()).backward()
        assert head.row_kernel.weight.grad.abs().sum() > 0
        optimiser.step()
    assert losses[ROW_CE_LOSS].item() < 0.5 * first, (first, losses[ROW_CE_LOSS].item())

    head.eval()
    outputs = head(levels)
    assert set(outputs) == {"lanes.logits", "lanes.points", "lanes.visibility"}  # no row logits at inference

    ops, (points, _) = export_head(head, levels, ["lanes.points", "lanes.logits"], str(tmp_path / "lanes.onnx"))
    assert not ops & FORBIDDEN_OPS - {"Shape"} and "MatMul" in ops and "GridSample" in ops
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING
    assert np.abs(points - outputs["lanes.points"].detach().numpy()).max() < 1e-4


def test_row_kernels_need_the_marking_map():
    heads = dict(lanes=dict(dim=32, num_queries=6, marking_search="kernel"))
    with pytest.raises(ConfigError, match="marking_refinement"):
        parse_config(experiment_dict("unused", model=dict(heads=heads), bdd100k=dict(data_root="unused")))
