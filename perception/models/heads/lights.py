"""DETR-style traffic-light head: a 2D box per query, its class is the light's state."""

from __future__ import annotations

from perception.core.light_states import LIGHT_STATES
from perception.models.heads.box_queries import BoxQueryHead


class LightHead(BoxQueryHead):
    """``lights.logits [B,Q,4]`` (sigmoid per state, order LIGHT_STATES), ``lights.boxes [B,Q,4]``
    (cxcywh in [0, 1]); training adds ``lights.aux{i}.*`` and ``lights.enc.*``."""

    prefix = "lights"

    def __init__(self, in_channels: int, dim: int = 64, num_queries: int = 30, num_layers: int = 2,
                 num_heads: int = 4, ffn_dim: int = 256, levels: tuple[int, ...] = (0, 1, 2), memory_convs: int = 0,
                 reference_sampling: bool = True, cross_attention: str = "dense", **denoising):
        super().__init__(in_channels, len(LIGHT_STATES), dim=dim, num_queries=num_queries, num_layers=num_layers,
                         num_heads=num_heads, ffn_dim=ffn_dim, levels=levels, memory_convs=memory_convs,
                         reference_sampling=reference_sampling, cross_attention=cross_attention, **denoising)
