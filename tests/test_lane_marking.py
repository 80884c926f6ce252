"""Lane points snapped to the marking map (perception/models/heads/lane_marking.py)."""

import torch

from perception.models.heads.lane_marking import snap_to_marking
from perception.models.heads.lanes import LaneHead


def _marking_with_line(x_cell: float, height: int = 14, width: int = 28) -> torch.Tensor:
    """[1,1,h,w] logits: a vertical marking centred at x ``x_cell`` in cells (cell k's centre at k + 0.5): +6 at
    its centre, falling linearly to -6 at 1.5 cells and beyond (what a trained map looks like: blurred by a cell)."""
    centres = torch.arange(width, dtype=torch.float32) + 0.5
    profile = 6.0 - 8.0 * (centres - x_cell).abs().clamp(max=1.5)
    return profile.expand(1, 1, height, width).clone()


def test_points_move_to_a_nearby_marking_with_sub_cell_precision():
    width = 28
    row_y = (torch.arange(6, dtype=torch.float32) + 0.5) / 6
    marking = _marking_with_line(x_cell=10.3, width=width)
    start = torch.full((1, 2, 6), 12.0 / width)  # 1.7 cells right of the marking
    snapped = snap_to_marking(start, row_y, marking, radius=4, stay_logit=torch.tensor(0.0))
    assert (snapped * width - 10.3).abs().max() < 0.35, snapped * width


def test_points_stay_where_no_marking_is_near():
    width = 28
    row_y = (torch.arange(6, dtype=torch.float32) + 0.5) / 6
    marking = torch.full((1, 1, 14, width), -8.0)
    start = torch.rand(1, 3, 6) * 0.8 + 0.1
    snapped = snap_to_marking(start, row_y, marking, radius=4, stay_logit=torch.tensor(0.0))
    assert torch.allclose(snapped, start, atol=1e-3)


def test_marking_outside_the_radius_is_ignored():
    width = 28
    row_y = (torch.arange(4, dtype=torch.float32) + 0.5) / 4
    marking = _marking_with_line(x_cell=3.5, width=width)
    start = torch.full((1, 1, 4), 12.5 / width)  # 9 cells away, radius 4
    snapped = snap_to_marking(start, row_y, marking, radius=4, stay_logit=torch.tensor(0.0))
    assert torch.allclose(snapped, start, atol=1e-3)


def test_lane_head_snaps_its_final_points_and_trains_the_map():
    torch.manual_seed(0)
    levels = [torch.randn(2, 16, 16 // k, 32 // k) for k in (1, 2, 4, 8)]  # strides 4..32 of a 64x128 input
    head = LaneHead(16, dim=32, num_queries=5, num_layers=2, num_points=8, ffn_dim=64, marking_refinement=True)
    head.train()
    outputs = head(levels)
    assert outputs["lanes.dense.mask"].shape == (2, 1, 16, 32)  # stride 4
    assert outputs["lanes.points"].shape == (2, 5, 8)
    outputs["lanes.points"].sum().backward()
    assert head.marking.classifier.weight.grad.abs().sum() > 0  # the points loss reaches the map
    head.eval()
    with torch.no_grad():
        assert "lanes.dense.mask" not in head(levels)
