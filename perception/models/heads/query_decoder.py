"""The one DETR-style query decoder every query head runs, with the geometry left to the head.

Memory tokens (``TokenMemory``) each get a class score and a proposal; the top-``num_queries``
tokens start the decoder (content = token feature, geometry = its proposal, both detached, as in
RT-DETR's query selection). Each decoder layer: the query reads the image at its reference
(``ReferenceSampler``, optional), attends (``DecoderLayer``), predicts classes and refines the
geometry (gradient stopped between layers). A head says only what its geometry is:

- ``geometry``: the output name (``boxes`` for 2D boxes, ``points`` for row-anchored lanes);
- ``propose(features, anchors)``: the proposals [B,N,G] of tokens [B,N,D] with anchors [B or 1,N,4] (the
  selected tokens'; the criteria call it for the tokens their dense loss reads);
- ``position(reference)``: the query's positional embedding [B,Q,D];
- ``sample_points(reference)``: where it reads the finest level, [B,Q,K,2] (x, y) in [0, 1];
- ``refine(i, queries, reference)``: layer i's new geometry [B,Q,G];
- ``attention_box(reference)``: the box [B,Q,4] cxcywh around which deformable cross-attention reads
  (``cross_attention="deformable"``);
- ``extra_outputs(i, queries, geometry, prefix)`` and ``dense_extras(finest, features, anchors)`` (training
  only): anything more, e.g. the obstacle head's 3D quantities (and per-token depth) or the lane head's marking mask.

Outputs (``<prefix>`` = the head's name): ``<prefix>.logits [B,Q,C]`` (sigmoid, no background class),
``<prefix>.<geometry>`` and the extras; in training also ``<prefix>.aux{i}.*`` per earlier layer,
``<prefix>.enc.{logits,<geometry>}`` for the selected proposals and ``<prefix>.dense.{logits,
features,anchors}`` for every token (the dense one-to-many loss, which proposes with the head's ``propose``).
Cross-attention is dense over all memory tokens (``cross_attention="dense"``) or multi-scale deformable
(``"deformable"``, deformable_attention.py).
"""

from __future__ import annotations

import torch
from torch import nn

from perception.models.heads.denoising import DenoisingBatch
from perception.models.heads.query_memory import (
    ReferenceSampler,
    TokenMemory,
    gather_tokens,
    init_focal_bias,
    select_top_k,
)
from perception.models.transformer import DecoderLayer, DeformableDecoderLayer

CROSS_ATTENTION = ("dense", "deformable")


class QueryDecoderHead(nn.Module):
    prefix = ""
    geometry = ""

    def __init__(self, in_channels: int, num_classes: int, dim: int, num_queries: int, num_layers: int,
                 num_heads: int, ffn_dim: int, levels: tuple[int, ...], memory_convs: int,
                 reference_sampling: bool, num_sample_points: int, cross_attention: str = "dense"):
        super().__init__()
        if cross_attention not in CROSS_ATTENTION:
            raise ValueError(f"cross_attention {cross_attention!r} is not one of {CROSS_ATTENTION}")
        self.deformable = cross_attention == "deformable"
        self.dim, self.num_queries, self.num_classes = dim, num_queries, num_classes
        self.memory = TokenMemory(in_channels, dim, levels, memory_convs, positions=not self.deformable)
        self.enc_output = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
        self.enc_class = nn.Linear(dim, num_classes)
        if self.deformable:
            self.layers = nn.ModuleList(DeformableDecoderLayer(dim, num_heads, ffn_dim, num_levels=len(levels))
                                        for _ in range(num_layers))
        else:
            self.layers = nn.ModuleList(DecoderLayer(dim, num_heads, ffn_dim, long_memory=True)
                                        for _ in range(num_layers))
        self.class_heads = nn.ModuleList(nn.Linear(dim, num_classes) for _ in range(num_layers))
        self.samplers = nn.ModuleList(ReferenceSampler(dim, num_sample_points) for _ in range(num_layers)) \
            if reference_sampling else None
        for head in [self.enc_class, *self.class_heads]:
            init_focal_bias(head)

    def input_levels(self) -> tuple[int, ...]:
        """The FPN levels this head reads (a neck of its own computes only these)."""
        return self.memory.levels

    # The head's geometry (see the module docstring).
    def propose(self, features: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def position(self, reference: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample_points(self, reference: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def refine(self, index: int, queries: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attention_box(self, reference: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def extra_outputs(self, index: int, queries: torch.Tensor, geometry: torch.Tensor,
                      prefix: str) -> dict[str, torch.Tensor]:
        return {}

    def dense_extras(self, finest: torch.Tensor, features: torch.Tensor,
                     anchors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Training-only outputs beside the dense loss's: ``finest`` [B,D,h,w] memory level, every token's feature
        [B,N,D] and anchor [1,N,4] cxcywh."""
        return {}

    def denoising_batch(self, targets: list[dict]) -> DenoisingBatch | None:
        """The denoising queries of these targets (heads that have them: ``BoxQueryHead``)."""
        raise ValueError(f"the {self.prefix} head has no denoising queries")

    def forward(self, levels: list[torch.Tensor], denoising: list[dict] | None = None) -> dict[str, torch.Tensor]:
        return self.decode(levels, denoising)[0]

    def decode(self, levels: list[torch.Tensor],
               denoising: list[dict] | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The outputs and the final layer's query features [B,Q,D] (for heads that read the image again
        with them, e.g. the lane head's row kernels). ``denoising`` (training only): the task's targets per
        image, from which the head adds denoising queries (``denoising.py``); their outputs are
        ``<prefix>.dn{i}.*`` per layer and ``<prefix>.dn.index``."""
        memory, memory_pos, anchors, finest = self.memory(levels)
        # (h, w) of each memory level, as Python ints: constants in an exported graph (static shapes).
        level_shapes = [(int(levels[i].shape[-2]), int(levels[i].shape[-1])) for i in self.memory.levels]
        features = self.enc_output(memory)  # (B, N, D)
        enc_logits = self.enc_class(features)  # (B, N, C)
        top = select_top_k(enc_logits, self.num_queries)  # (B, Q)
        selected = gather_tokens(features, top)  # (B, Q, D)
        queries = selected.detach()
        # Proposals of the selected tokens only (the proposal MLP runs on Q tokens, not N). The dense loss
        # proposes for the tokens it reads itself (the criterion calls ``propose`` on ``dense.features``): the
        # box heads' ATSS positives are a few per object (the demo's training step about 0.94x of proposing for
        # all N tokens, measured side by side).
        top_anchors = gather_tokens(anchors.expand(features.shape[0], -1, -1), top)  # (B, Q, 4)
        reference = self.propose(selected, top_anchors)  # (B, Q, G)
        p, g = self.prefix, self.geometry
        outputs: dict[str, torch.Tensor] = {}
        if self.training:
            outputs[f"{p}.enc.logits"] = gather_tokens(enc_logits, top)
            outputs[f"{p}.enc.{g}"] = reference
            # Every token's class score and feature, for the dense one-to-many loss that trains query selection.
            outputs[f"{p}.dense.logits"] = enc_logits  # (B, N, C)
            outputs[f"{p}.dense.features"] = features  # (B, N, D)
            outputs[f"{p}.dense.anchors"] = anchors.expand(features.shape[0], -1, -1)  # (B, N, 4)
            outputs.update(self.dense_extras(finest, features, anchors))
        reference = reference.detach()
        dn = self.denoising_batch(denoising) if denoising is not None and self.training else None
        k, self_mask = 0, None  # denoising queries come first: [:, :k]
        if dn is not None:
            k, self_mask = dn.content.shape[1], dn.attend
            queries = torch.cat([dn.content, queries], dim=1)
            reference = torch.cat([dn.reference, reference], dim=1)
            outputs[f"{p}.dn.index"] = dn.index
        for i, (layer, class_head) in enumerate(zip(self.layers, self.class_heads)):
            query_pos = self.position(reference)
            if self.samplers is not None:
                queries = queries + self.samplers[i](finest, self.sample_points(reference))
            if self.deformable:
                queries = layer(queries, memory, query_pos, self.attention_box(reference), level_shapes,
                                self_mask=self_mask)
            else:
                queries = layer(queries, memory, query_pos=query_pos, memory_pos=memory_pos, self_mask=self_mask)
            geometry = self.refine(i, queries, reference)
            last = i == len(self.layers) - 1
            if last or self.training:
                prefix = p if last else f"{p}.aux{i}"
                layer_outputs = {"logits": class_head(queries), g: geometry}
                layer_outputs |= {name[len(p) + 1:]: value
                                  for name, value in self.extra_outputs(i, queries, geometry, p).items()}
                for name, value in layer_outputs.items():
                    outputs[f"{prefix}.{name}"] = value[:, k:]
                    if dn is not None:
                        outputs[f"{p}.dn{i}.{name}"] = value[:, :k]
            reference = geometry.detach()
        return outputs, queries[:, k:]
