"""2D boxes on the shared query decoder: proposals and refinements in logit space of cxcywh.

Each memory token predicts a box relative to its anchor (two-stage / RT-DETR style); every
decoder layer refines it (new = sigmoid(logit(previous) + delta)). A query's position is the sine
encoding of its box, and it reads the image on a 3x3 grid over the middle half of its box.
Subclasses add per-query outputs (``extra_outputs``), e.g. the obstacle head's 3D quantities.
"""

from __future__ import annotations

import torch
from torch import nn

from perception.models.heads.denoising import DenoisingBatch, DenoisingQueries
from perception.models.heads.query_decoder import QueryDecoderHead
from perception.models.heads.query_memory import (
    BOX_SAMPLE_OFFSETS,
    MLP,
    box_sample_points,
    inverse_sigmoid,
    zero_last_layer,
)
from perception.models.position_encoding import box_sine_encoding


class BoxQueryHead(QueryDecoderHead):
    """FPN levels -> ``<prefix>.logits [B,Q,C]`` (sigmoid, no background class) and
    ``<prefix>.boxes [B,Q,4]`` (cxcywh in [0, 1] of the input image), plus ``extra_outputs``."""

    prefix = "boxes"
    geometry = "boxes"

    def __init__(self, in_channels: int, num_classes: int, dim: int = 128, num_queries: int = 100,
                 num_layers: int = 3, num_heads: int = 4, ffn_dim: int = 512, levels: tuple[int, ...] = (1, 2, 3),
                 memory_convs: int = 0, reference_sampling: bool = True, cross_attention: str = "dense",
                 denoising_queries: int = 0, denoising_box_noise: float = 0.4, denoising_label_noise: float = 0.2):
        """``denoising_queries`` > 0: up to that many noised ground-truth queries per image in training
        (``denoising.py``; DN-DETR's box and label noise ``denoising_box_noise``, ``denoising_label_noise``)."""
        super().__init__(in_channels, num_classes, dim, num_queries, num_layers, num_heads, ffn_dim, levels,
                         memory_convs, reference_sampling, num_sample_points=len(BOX_SAMPLE_OFFSETS),
                         cross_attention=cross_attention)
        self.denoising = DenoisingQueries(num_classes, dim, denoising_queries, denoising_box_noise,
                                          denoising_label_noise) if denoising_queries > 0 else None
        self.register_buffer("sample_offsets", BOX_SAMPLE_OFFSETS.clone(), persistent=False)  # (9, 2), on the device
        self.enc_box = MLP(dim, dim, 4, 3)
        self.query_pos = MLP(dim, dim, dim, 2)
        self.box_heads = nn.ModuleList(MLP(dim, dim, 4, 3) for _ in range(num_layers))
        for mlp in [self.enc_box, *self.box_heads]:
            zero_last_layer(mlp)

    def denoising_batch(self, targets: list[dict]) -> DenoisingBatch | None:
        if self.denoising is None:
            return super().denoising_batch(targets)
        return self.denoising(targets, self.num_queries)

    def propose(self, features: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        return (self.enc_box(features) + inverse_sigmoid(anchors)).sigmoid()  # (B, N, 4)

    def position(self, reference: torch.Tensor) -> torch.Tensor:
        return self.query_pos(box_sine_encoding(reference, self.dim))

    def sample_points(self, reference: torch.Tensor) -> torch.Tensor:
        return box_sample_points(reference, self.sample_offsets)

    def attention_box(self, reference: torch.Tensor) -> torch.Tensor:
        return reference  # (B, Q, 4) cxcywh: the query's own box

    def refine(self, index: int, queries: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return (self.box_heads[index](queries) + inverse_sigmoid(reference)).sigmoid()
