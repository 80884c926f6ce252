"""A DETR-style 2D box decoder with query selection and layer-by-layer box refinement.

Each memory token predicts a class and a box relative to its anchor (two-stage / RT-DETR
style); the top-``num_queries`` tokens start the decoder (content = token feature, position =
its box). Every decoder layer refines the boxes (new = sigmoid(logit(previous) + delta),
gradient stopped between layers) and predicts classes. Subclasses add per-query outputs
(``extra_outputs``), e.g. the obstacle head's 3D quantities. Standard attention only.
"""

from __future__ import annotations

import torch
from torch import nn

from perception.models.heads.query_memory import (
    BOX_SAMPLE_OFFSETS,
    MLP,
    ReferenceSampler,
    TokenMemory,
    box_sample_points,
    gather_tokens,
    init_focal_bias,
    inverse_sigmoid,
    select_top_k,
    zero_last_layer,
)
from perception.models.position_encoding import box_sine_encoding
from perception.models.transformer import DecoderLayer


class BoxQueryHead(nn.Module):
    """FPN levels -> ``<prefix>.logits [B,Q,C]`` (sigmoid, no background class) and
    ``<prefix>.boxes [B,Q,4]`` (cxcywh in [0, 1] of the input image), plus ``extra_outputs``.

    In training also ``<prefix>.aux{i}.*`` per earlier decoder layer, ``<prefix>.enc.{logits,boxes}``
    for the selected token proposals and ``<prefix>.dense.{logits,boxes,anchors}`` for every token.
    """

    prefix = "boxes"

    def __init__(self, in_channels: int, num_classes: int, dim: int = 128, num_queries: int = 100,
                 num_layers: int = 3, num_heads: int = 4, ffn_dim: int = 512, levels: tuple[int, ...] = (1, 2, 3),
                 memory_convs: int = 0, reference_sampling: bool = True):
        super().__init__()
        self.dim, self.num_queries, self.num_classes = dim, num_queries, num_classes
        self.memory = TokenMemory(in_channels, dim, levels, memory_convs)
        self.enc_output = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
        self.enc_class = nn.Linear(dim, num_classes)
        self.enc_box = MLP(dim, dim, 4, 3)
        self.query_pos = MLP(dim, dim, dim, 2)
        self.layers = nn.ModuleList(DecoderLayer(dim, num_heads, ffn_dim) for _ in range(num_layers))
        self.class_heads = nn.ModuleList(nn.Linear(dim, num_classes) for _ in range(num_layers))
        self.box_heads = nn.ModuleList(MLP(dim, dim, 4, 3) for _ in range(num_layers))
        self.samplers = nn.ModuleList(ReferenceSampler(dim, len(BOX_SAMPLE_OFFSETS)) for _ in range(num_layers)) \
            if reference_sampling else None
        for head in [self.enc_class, *self.class_heads]:
            init_focal_bias(head)
        for mlp in [self.enc_box, *self.box_heads]:
            zero_last_layer(mlp)

    def extra_outputs(self, queries: torch.Tensor, boxes: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
        """Per-query outputs beyond class and box (none here)."""
        return {}

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        memory, memory_pos, anchors, finest = self.memory(levels)
        features = self.enc_output(memory)  # (B, N, D)
        enc_logits = self.enc_class(features)  # (B, N, C)
        enc_boxes = (self.enc_box(features) + inverse_sigmoid(anchors)).sigmoid()  # (B, N, 4)
        top = select_top_k(enc_logits, self.num_queries)  # (B, Q)
        queries = gather_tokens(features, top).detach()
        reference = gather_tokens(enc_boxes, top)  # (B, Q, 4)
        outputs: dict[str, torch.Tensor] = {}
        if self.training:
            outputs[f"{self.prefix}.enc.logits"] = gather_tokens(enc_logits, top)
            outputs[f"{self.prefix}.enc.boxes"] = reference
            # Every token's proposal, for the dense one-to-many loss that trains query selection.
            outputs[f"{self.prefix}.dense.logits"] = enc_logits  # (B, N, C)
            outputs[f"{self.prefix}.dense.boxes"] = enc_boxes  # (B, N, 4)
            outputs[f"{self.prefix}.dense.anchors"] = anchors.expand(enc_boxes.shape[0], -1, -1)  # (B, N, 4)
        reference = reference.detach()
        for i, (layer, class_head, box_head) in enumerate(zip(self.layers, self.class_heads, self.box_heads)):
            query_pos = self.query_pos(box_sine_encoding(reference, self.dim))
            if self.samplers is not None:
                queries = queries + self.samplers[i](finest, box_sample_points(reference))
            queries = layer(queries, memory, query_pos=query_pos, memory_pos=memory_pos)
            boxes = (box_head(queries) + inverse_sigmoid(reference)).sigmoid()
            last = i == len(self.layers) - 1
            if last or self.training:
                prefix = self.prefix if last else f"{self.prefix}.aux{i}"
                outputs[f"{prefix}.logits"] = class_head(queries)
                outputs[f"{prefix}.boxes"] = boxes
                outputs.update(self.extra_outputs(queries, boxes, prefix))
            reference = boxes.detach()
        return outputs
