"""Lane points snapped to the marking map (perception/models/heads/lane_marking.py)."""

import pytest
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


def _row_search(points, marking, sigma_cells=4.0):
    from perception.models.heads.lane_marking import locate_on_rows

    row_y = (torch.arange(points.shape[-1], dtype=torch.float32) + 0.5) / points.shape[-1]
    return locate_on_rows(points, row_y, marking, torch.tensor(sigma_cells).log(), torch.tensor(0.0))


def test_row_search_finds_a_marking_beyond_the_window_radius_with_sub_cell_precision():
    width = 28
    marking = _marking_with_line(x_cell=10.3, width=width)
    located = _row_search(torch.full((1, 2, 6), 16.5 / width), marking)  # 6.2 cells right: outside radius 4
    assert (located * width - 10.3).abs().max() < 0.5, located * width  # the prior pulls a little toward x


def test_row_search_prefers_the_nearer_of_two_markings():
    width = 40
    marking = torch.maximum(_marking_with_line(x_cell=10.5, width=width), _marking_with_line(x_cell=25.5, width=width))
    located = _row_search(torch.full((1, 1, 4), 22.0 / width), marking)  # 3.5 cells from one, 11.5 from the other
    assert (located * width - 25.5).abs().max() < 0.5, located * width


def test_row_search_keeps_x_without_a_marking_and_off_the_image():
    width = 28
    start = torch.tensor([[[0.3, 0.6, -0.2, 1.3]]])  # the last two: the lane is off the image at those rows
    located = _row_search(start, torch.full((1, 1, 14, width), -8.0))
    assert torch.allclose(located[..., :2], start[..., :2], atol=2e-3)  # flat map: the prior's mean is x itself
    assert torch.allclose(located[..., 2:], start[..., 2:], atol=1e-3)  # the prior vanishes in the image: stay


def test_lane_head_with_row_search_learns_the_prior_width():
    torch.manual_seed(0)
    levels = [torch.randn(2, 16, 16 // k, 32 // k) for k in (1, 2, 4, 8)]
    head = LaneHead(16, dim=32, num_queries=5, num_layers=2, num_points=8, ffn_dim=64, marking_refinement=True,
                    marking_search="row")
    head.train()
    outputs = head(levels)
    assert outputs["lanes.points"].shape == (2, 5, 8)
    (outputs["lanes.points"] * torch.linspace(-1, 1, 8)).sum().backward()
    assert head.log_sigma.grad is not None and head.log_sigma.grad.abs() > 0
    assert head.marking.classifier.weight.grad.abs().sum() > 0


def test_sub_cell_offsets_place_the_marking_inside_its_cell():
    from perception.models.heads.lane_marking import locate_on_rows

    width, rows = 28, 4
    row_y = (torch.arange(rows, dtype=torch.float32) + 0.5) / rows
    logits = torch.full((1, 1, 14, width), -8.0)
    logits[..., 10] = 8.0  # the marking is in cell 10 (centre 10.5) ...
    offsets = torch.zeros(1, 1, 14, width)
    offsets[..., 10] = -0.2  # ... 0.2 cells left of its centre
    start = torch.full((1, 1, rows), 12.0 / width)
    args = (start, row_y)
    plain = locate_on_rows(*args, logits, torch.tensor(4.0).log(), torch.tensor(0.0))
    placed = locate_on_rows(*args, torch.cat([logits, offsets], 1), torch.tensor(4.0).log(), torch.tensor(0.0),
                            log_sharpness=torch.tensor(0.0))
    assert (plain * width - 10.5).abs().max() < 0.05
    assert (placed * width - 10.3).abs().max() < 0.05


def test_lane_head_with_offsets_trains_them_and_the_sharpness():
    torch.manual_seed(0)
    levels = [torch.randn(2, 16, 16 // k, 32 // k) for k in (1, 2, 4, 8)]
    head = LaneHead(16, dim=32, num_queries=5, num_layers=2, num_points=8, ffn_dim=64, marking_refinement=True,
                    marking_search="row", marking_offsets=True)
    head.train()
    outputs = head(levels)
    assert outputs["lanes.dense.mask"].shape == (2, 1, 16, 32)  # the logits only: the mask loss's input
    (outputs["lanes.points"] * torch.linspace(-1, 1, 8)).sum().backward()
    assert head.marking.offset.weight.grad.abs().sum() > 0
    assert head.log_sharpness.grad is not None


def test_offsets_need_the_row_search():
    with pytest.raises(ValueError, match="marking_search='row'"):
        LaneHead(16, dim=32, num_queries=5, num_layers=2, num_points=8, ffn_dim=64, marking_refinement=True,
                 marking_offsets=True)
