"""Multi-scale deformable cross-attention reads what it claims, learns where to look, and heads run with it."""

from __future__ import annotations

import pytest
import torch
from conftest import ALL_HEADS, TINY_MODEL, experiment_dict

from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.models.deformable_attention import DeformableCrossAttention
from perception.models.heads.lights import LightHead

LEVEL_SHAPES = [(8, 16), (4, 8)]


def _memory(dim: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, sum(h * w for h, w in LEVEL_SHAPES), dim)


def test_a_point_on_a_cell_centre_reads_that_token():
    """All weight on level 1 and a zero-size reference box at a cell centre: the output is that token
    through the value and output projections (bilinear at a centre is the cell itself)."""
    torch.manual_seed(0)
    dim, heads, points = 16, 2, 3
    attention = DeformableCrossAttention(dim, heads, num_levels=2, num_points=points)
    with torch.no_grad():  # level 1 gets every weight
        bias = torch.full((heads, 2, points), -50.0)
        bias[:, 1] = 0.0
        attention.attention_weights.bias.copy_(bias.flatten())
    memory = _memory(dim)
    row, col = 2, 5  # a cell of level 1 (4 x 8)
    reference = torch.tensor([(col + 0.5) / 8, (row + 0.5) / 4, 0.0, 0.0]).expand(2, 3, 4)
    out = attention(torch.randn(2, 3, dim), reference, memory, LEVEL_SHAPES)
    token = memory[:, 8 * 16 + row * 8 + col]  # (B, D)
    expected = attention.output_proj(attention.value_proj(token))[:, None].expand(-1, 3, -1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_heads_read_their_own_channels_at_their_own_points():
    """Head h's output channels come from head h's value channels sampled where head h looks."""
    torch.manual_seed(0)
    dim, heads = 8, 2
    attention = DeformableCrossAttention(dim, heads, num_levels=2, num_points=1)
    with torch.no_grad():
        attention.value_proj.weight.copy_(torch.eye(dim))
        attention.output_proj.weight.copy_(torch.eye(dim))
        attention.sampling_offsets.bias.zero_()
        bias = torch.full((heads, 2, 1), -50.0)
        bias[0, 0] = 0.0  # head 0 reads level 0, head 1 level 1
        bias[1, 1] = 0.0
        attention.attention_weights.bias.copy_(bias.flatten())
    memory = _memory(dim, batch=1)
    reference = torch.tensor([[[(3 + 0.5) / 16, (1 + 0.5) / 8, 0.0, 0.0]]])  # cell (1, 3) of level 0
    out = attention(torch.zeros(1, 1, dim), reference, memory, LEVEL_SHAPES)[0, 0]
    level0_token = memory[0, 1 * 16 + 3]
    torch.testing.assert_close(out[:4], level0_token[:4], atol=1e-5, rtol=1e-5)
    # On the 4 x 8 level the same point (x 0.219, y 0.188) is at cell coordinates (1.25, 0.25): bilinear
    # between cells (row, col) (0, 1), (0, 2), (1, 1), (1, 2).
    level1 = memory[0, 8 * 16:].view(4, 8, dim)
    expected = (0.75 * 0.75 * level1[0, 1] + 0.75 * 0.25 * level1[0, 2] + 0.25 * 0.75 * level1[1, 1]
                + 0.25 * 0.25 * level1[1, 2])
    torch.testing.assert_close(out[4:], expected[4:], atol=1e-5, rtol=1e-5)


def test_offsets_and_weights_get_gradients_and_start_spread_around_the_box():
    torch.manual_seed(0)
    attention = DeformableCrossAttention(16, 4, num_levels=2, num_points=4)
    # Initial offsets: head h along its own direction, points 1..4 steps out (Deformable DETR's init).
    start = attention.sampling_offsets.bias.view(4, 2, 4, 2)
    assert torch.allclose(start[:, :, 1], 2 * start[:, :, 0])
    assert len({tuple(d.tolist()) for d in start[:, 0, 0]}) == 4  # four directions
    reference = torch.rand(2, 5, 4) * 0.5 + 0.25
    out = attention(torch.randn(2, 5, 16), reference, _memory(16), LEVEL_SHAPES)
    out.square().sum().backward()
    assert attention.sampling_offsets.weight.grad.abs().sum() > 0
    assert attention.attention_weights.weight.grad.abs().sum() > 0


def test_a_head_with_deformable_cross_attention_trains_and_has_no_key_projection():
    torch.manual_seed(0)
    head = LightHead(32, dim=32, num_queries=10, num_layers=2, cross_attention="deformable")
    levels = [torch.randn(2, 32, 32 // 2 ** i, 64 // 2 ** i) for i in range(4)]
    outputs = head(levels)
    assert outputs["lights.boxes"].shape == (2, 10, 4)
    outputs["lights.logits"].sum().backward()
    assert not any("k_proj" in name for name, _ in head.layers[0].cross_attn.named_parameters())
    assert head.layers[0].cross_attn.sampling_offsets.weight.grad.abs().sum() > 0


def test_config_rejects_an_unknown_cross_attention():
    heads = dict(ALL_HEADS, obstacles=dict(ALL_HEADS["obstacles"], cross_attention="sparse"))
    with pytest.raises(ConfigError, match="model.heads.obstacles.cross_attention"):
        parse_config(experiment_dict("unused", model=dict(TINY_MODEL, heads=heads), bdd100k=dict(data_root="unused")))
