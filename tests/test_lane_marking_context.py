"""The lane marking map's dilated context blocks (model.heads.lanes.marking_context_dilations;
lane_marking.MarkingMap): a wider view for the map, the same map at the start, plain dilated Conv in the graph."""

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.models.heads.lane_marking import MarkingMap
from perception.models.heads.lanes import LaneHead


def _receptive_half_width(marking: MarkingMap, size: int = 64) -> int:
    """Cells either side of the centre whose input moves the centre cell's logit (the map's view), measured by the
    gradient of one output cell. GroupNorm's statistics reach every cell a little (about 1 / cells each), so a
    column counts where its gradient is at least 1 % of the largest."""
    stride4 = torch.randn(1, 8, size, size, requires_grad=True)
    logits, _ = marking(stride4)
    logits[0, 0, size // 2, size // 2].backward()
    per_column = stride4.grad.abs().amax(dim=(0, 1, 2))
    columns = torch.nonzero(per_column > 0.01 * per_column.max()).flatten()
    return int(size // 2 - columns.min())


def test_context_blocks_start_as_the_plain_map_and_widen_its_view():
    torch.manual_seed(0)
    plain = MarkingMap(8, 16)
    with_context = MarkingMap(8, 16, context_dilations=(2, 4, 8))
    with_context.load_state_dict(plain.state_dict(), strict=False)  # the shared layers' weights
    stride4 = torch.randn(2, 8, 24, 48)
    assert torch.allclose(with_context(stride4)[0], plain(stride4)[0])  # residual branches zero at the start
    with_context(stride4)[0].sum().backward()
    assert all(block.norm.weight.grad.abs().sum() > 0 for block in with_context.body[6:])  # and they can open
    for block in with_context.body[6:]:  # as after some training: the residual branches open
        torch.nn.init.ones_(block.norm.weight)
    assert _receptive_half_width(plain) == 2  # two 3x3 convs
    assert _receptive_half_width(with_context) == 2 + 2 + 4 + 8


def test_lane_head_with_context_blocks_exports_with_tensorrt_ops(tmp_path):
    torch.manual_seed(0)
    head = LaneHead(16, dim=32, num_queries=4, num_points=8, num_layers=2, ffn_dim=64, marking_refinement=True,
                    marking_search="kernel", marking_channels=16, marking_context_dilations=(2, 4))
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    head.eval()
    with torch.no_grad():
        expected = head(levels)["lanes.points"].numpy()
    ops, (points,) = export_head(head, levels, ["lanes.points"], str(tmp_path / "lanes.onnx"))
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING
    assert np.abs(points - expected).max() < 1e-4


def test_context_blocks_need_the_marking_map_and_whole_dilations():
    with pytest.raises(ConfigError, match="marking_context_dilations"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(marking_context_dilations=[2])))))
    with pytest.raises(ConfigError, match="whole numbers"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
            marking_refinement=True, marking_context_dilations=[0])))))
    parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(
        marking_refinement=True, marking_context_dilations=[2, 4, 8])))))
