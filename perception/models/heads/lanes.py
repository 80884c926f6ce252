"""DETR-style lane head: per query a lane class and x positions at fixed rows with visibility.

Same building blocks as the box heads: the flattened multi-scale memory, query selection from
per-token proposals and layer-by-layer refinement of the points (new = previous + delta).

Every token proposes a lane through its own centre (x_t, y_t): x(y) = x_t + c0 + c1 (y - y_t) +
c2 (y - y_t)^2 + c3 (y - y_t)^3, the coefficients from an MLP of the token's feature (LaneATT /
CLRNet's line anchors that start at a point, with a learned direction). A token on a marking then
only has to read the marking's local direction and bend, which a convolutional feature sees. The
earlier proposal, x(y) = sigmoid(logit(x_t) + poly(y)) with y absolute, asked each token where in
the image its own row is, which its feature does not say: the nearest of 20 queries stayed 27 px
(of 448) off the lanes of its own training images after 900 steps.

Proposals and refinements are cubic polynomials (``SHAPE_DEGREE``), not P free offsets: a lane's x
varies smoothly with y, and four coefficients learn far faster than 24 independent numbers
(measured: free offsets left the points jagged after 200 overfitting steps). x is linear, not
squashed by a sigmoid, so a lane that leaves the image at a side keeps its straight course (its rows
outside [0, 1] are invisible). The outputs are still x at every row, so the matcher, loss and
export see points.
"""

from __future__ import annotations

import torch
from torch import nn

from perception.core.lane_coding import LANE_CLASSES, anchor_rows
from perception.models.heads.query_memory import (
    MLP,
    ReferenceSampler,
    TokenMemory,
    gather_tokens,
    init_focal_bias,
    select_top_k,
    zero_last_layer,
)
from perception.models.transformer import DecoderLayer

SHAPE_DEGREE = 3


def row_basis(num_points: int, degree: int = SHAPE_DEGREE) -> torch.Tensor:
    """[P, degree + 1]: powers of the row's y mapped to [-1, 1] (top to bottom)."""
    y = torch.linspace(-1.0, 1.0, num_points)
    return torch.stack([y ** k for k in range(degree + 1)], dim=1)


def relative_basis(row_y: torch.Tensor, token_y: torch.Tensor, degree: int = SHAPE_DEGREE) -> torch.Tensor:
    """row_y [P] and token_y [..., 1] in [0, 1] of the input height -> [..., P, degree + 1]: powers of
    (row y - token y), so coefficient 0 shifts the lane and the others turn and bend it about the token."""
    offset = row_y - token_y  # (..., P)
    return torch.stack([offset ** k for k in range(degree + 1)], dim=-1)


class LaneHead(nn.Module):
    prefix = "lanes"

    def __init__(self, in_channels: int, num_classes: int = len(LANE_CLASSES), num_points: int = 24, dim: int = 64,
                 num_queries: int = 20, num_layers: int = 2, num_heads: int = 4, ffn_dim: int = 256,
                 levels: tuple[int, ...] = (1, 2, 3), memory_convs: int = 0, reference_sampling: bool = True):
        super().__init__()
        self.dim, self.num_queries, self.num_classes, self.num_points = dim, num_queries, num_classes, num_points
        self.memory = TokenMemory(in_channels, dim, levels, memory_convs)
        self.enc_output = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
        self.enc_class = nn.Linear(dim, num_classes)
        self.register_buffer("basis", row_basis(num_points), persistent=False)  # (P, K)
        shape_size = self.basis.shape[1]
        self.enc_points = MLP(dim, dim, shape_size, 3)
        self.query_pos = MLP(num_points, dim, dim, 2)
        self.layers = nn.ModuleList(DecoderLayer(dim, num_heads, ffn_dim) for _ in range(num_layers))
        self.class_heads = nn.ModuleList(nn.Linear(dim, num_classes) for _ in range(num_layers))
        self.point_heads = nn.ModuleList(MLP(dim, dim, shape_size, 3) for _ in range(num_layers))
        self.visibility_heads = nn.ModuleList(nn.Linear(dim, num_points) for _ in range(num_layers))
        # Each query reads the image at its lane's x on every anchor row (CLRNet-style line pooling).
        self.samplers = nn.ModuleList(ReferenceSampler(dim, num_points) for _ in range(num_layers)) \
            if reference_sampling else None
        # y of the anchor rows in [0, 1] of the input height (lane_coding's rows, top to bottom): (P,)
        self.register_buffer("row_y", torch.as_tensor(anchor_rows(num_points, 1.0), dtype=torch.float32),
                             persistent=False)
        # Training only: lane markings as a mask on the finest memory level (a linear probe of its
        # features, the same features the reference sampler reads), absent from the exported graph.
        self.mask_probe = nn.Conv2d(dim, 1, 1)
        for head in [self.enc_class, *self.class_heads]:
            init_focal_bias(head)
        for mlp in [self.enc_points, *self.point_heads]:
            zero_last_layer(mlp)

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Returns (B images, Q queries, C lane classes, P rows; see lane_coding):

        lanes.logits [B,Q,C]      class logits (sigmoid; no background class)
        lanes.points [B,Q,P]      x at each anchor row, normalised by the input width (outside [0, 1]: off the
                                  image at that row)
        lanes.visibility [B,Q,P]  logit that the lane crosses the row inside the image
        In training also ``lanes.aux{i}.*`` per earlier decoder layer, ``lanes.enc.{logits,points}`` and
        ``lanes.dense.{logits,points,anchors}`` (every token, for the dense loss) and ``lanes.dense.mask``
        [B,1,h,w] (lane-marking logits on the finest memory level, for the auxiliary mask loss).
        """
        memory, memory_pos, anchors, finest = self.memory(levels)
        features = self.enc_output(memory)  # (B, N, D)
        enc_logits = self.enc_class(features)  # (B, N, C)
        # Every token proposes a lane through its own centre (anchors cxcywh, normalised): (B, N, P).
        row_y = self.row_y.to(features.dtype)
        shape = relative_basis(row_y, anchors[..., 1:2], SHAPE_DEGREE)  # (1, N, P, K)
        enc_points = anchors[..., :1] + (shape @ self.enc_points(features)[..., None]).squeeze(-1)
        top = select_top_k(enc_logits, self.num_queries)  # (B, Q)
        queries = gather_tokens(features, top).detach()
        reference = gather_tokens(enc_points, top)  # (B, Q, P)
        outputs: dict[str, torch.Tensor] = {}
        if self.training:
            outputs["lanes.enc.logits"] = gather_tokens(enc_logits, top)
            outputs["lanes.enc.points"] = reference
            outputs["lanes.dense.logits"] = enc_logits  # (B, N, C): every token, for the dense loss
            outputs["lanes.dense.points"] = enc_points  # (B, N, P)
            outputs["lanes.dense.anchors"] = anchors.expand(enc_points.shape[0], -1, -1)  # (B, N, 4)
            outputs["lanes.dense.mask"] = self.mask_probe(finest)  # (B, 1, h, w) logits, finest level
        reference = reference.detach()
        rows = row_y.expand_as(reference)  # (B, Q, P)
        for i, layer in enumerate(self.layers):
            if self.samplers is not None:
                row_points = torch.stack([reference, rows], -1)  # (B, Q, P, 2): x and y of each row's point
                queries = queries + self.samplers[i](finest, row_points)
            # x may leave [0, 1] where a lane leaves the image; the position MLP sees it bounded.
            query_pos = self.query_pos(reference.clamp(-0.5, 1.5))
            queries = layer(queries, memory, query_pos=query_pos, memory_pos=memory_pos)
            points = reference + self.point_heads[i](queries) @ self.basis.T
            last = i == len(self.layers) - 1
            if last or self.training:
                prefix = "lanes" if last else f"lanes.aux{i}"
                outputs[f"{prefix}.logits"] = self.class_heads[i](queries)
                outputs[f"{prefix}.points"] = points
                outputs[f"{prefix}.visibility"] = self.visibility_heads[i](queries)
            reference = points.detach()
        return outputs
