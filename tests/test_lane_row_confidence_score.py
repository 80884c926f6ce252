"""Lane scores times the rows' confidence (model.heads.lanes.row_confidence_score;
lane_marking.rescore_by_row_confidence): the formula, which rows count, inference only, plain ONNX."""

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.models.heads.lane_marking import rescore_by_row_confidence
from perception.models.heads.lanes import LaneHead

ROWS, CELLS = 4, 8


def _row_logits(sharp_rows: int) -> torch.Tensor:
    """One image, one lane [1,1,ROWS,CELLS]: the first ``sharp_rows`` rows sure of cell 3 (probability ~1), the
    rest flat (1 / CELLS)."""
    logits = torch.zeros(1, 1, ROWS, CELLS)
    logits[..., :sharp_rows, 3] = 30.0
    return logits


def test_the_score_becomes_p_to_one_minus_w_times_the_mean_row_confidence():
    logits = torch.tensor([[[1.2, -0.4]]])  # (B=1, Q=1, C=2)
    drawn = torch.ones(1, 1, ROWS)  # visibility logits > 0
    points = torch.full((1, 1, ROWS), 0.5)
    weight = 0.25
    rescored = rescore_by_row_confidence(logits, _row_logits(sharp_rows=2), drawn, points, weight)
    confidence = (2 * 1.0 + 2 * (1 / CELLS)) / ROWS
    expected = logits.sigmoid() ** (1 - weight) * confidence ** weight
    assert torch.allclose(rescored.sigmoid(), expected, atol=1e-5)
    # A lane whose rows are all sure keeps almost its score; one whose rows are all flat falls below it.
    sure = rescore_by_row_confidence(logits, _row_logits(ROWS), drawn, points, weight).sigmoid()
    unsure = rescore_by_row_confidence(logits, _row_logits(0), drawn, points, weight).sigmoid()
    assert torch.allclose(sure, logits.sigmoid() ** (1 - weight), atol=1e-5)
    assert (unsure < 0.6 * sure).all()


def test_only_the_rows_the_lane_is_drawn_through_count():
    logits = torch.tensor([[[0.8, 0.8]]])
    row_logits = _row_logits(sharp_rows=2)  # rows 0-1 sure, rows 2-3 flat
    points = torch.full((1, 1, ROWS), 0.5)
    visible_sharp = torch.tensor([[[1.0, 1.0, -1.0, -1.0]]])  # the flat rows are not drawn (visibility logit < 0)
    off_image = points.clone()
    off_image[..., 2:] = 1.2  # the flat rows lie right of the image
    expected = logits.sigmoid() ** 0.5  # confidence 1 on the drawn rows
    for visibility, x in ((visible_sharp, points), (torch.ones(1, 1, ROWS), off_image)):
        assert torch.allclose(rescore_by_row_confidence(logits, row_logits, visibility, x, 0.5).sigmoid(), expected,
                              atol=1e-5)
    # No drawn row: confidence 0, the score falls to the floor instead of dividing by zero.
    nothing = rescore_by_row_confidence(logits, row_logits, -torch.ones(1, 1, ROWS), points, 0.5)
    assert torch.isfinite(nothing).all() and (nothing.sigmoid() < 1e-2).all()


def _head(weight: float) -> LaneHead:
    torch.manual_seed(0)
    return LaneHead(16, dim=32, num_queries=4, num_points=8, num_layers=2, ffn_dim=64, marking_refinement=True,
                    marking_search="kernel", marking_channels=16, row_confidence_score=weight)


def test_the_head_rescores_at_inference_only_and_exports_with_tensorrt_ops(tmp_path):
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    plain, rescoring = _head(0.0), _head(0.25)
    rescoring.load_state_dict(plain.state_dict())
    plain.train(), rescoring.train()
    torch.manual_seed(1)
    trained_plain = plain(levels)["lanes.logits"]
    torch.manual_seed(1)
    assert torch.equal(rescoring(levels)["lanes.logits"], trained_plain)  # the class loss sees the class logits
    plain.eval(), rescoring.eval()
    with torch.no_grad():
        before, after = plain(levels), rescoring(levels)
    assert torch.equal(after["lanes.points"], before["lanes.points"])
    assert not torch.allclose(after["lanes.logits"], before["lanes.logits"])
    ops, (logits,) = export_head(rescoring, levels, ["lanes.logits"], str(tmp_path / "lanes.onnx"))
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING
    assert np.abs(logits - after["lanes.logits"].numpy()).max() < 1e-4


def test_the_rescoring_needs_the_row_kernels_and_a_weight_below_one():
    with pytest.raises(ConfigError, match="row_confidence_score needs"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
            marking_refinement=True, marking_search="row", row_confidence_score=0.25)))))
    with pytest.raises(ConfigError, match=r"must be in \[0, 1\)"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
            marking_refinement=True, marking_search="kernel", row_confidence_score=1.0)))))
    parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
        marking_refinement=True, marking_search="kernel", row_confidence_score=0.25)))))
