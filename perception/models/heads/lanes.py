"""DETR-style lane head: per query a lane class and x positions at fixed rows with visibility.

The shared query decoder (``query_decoder.QueryDecoderHead``) with row-anchored geometry: per-token
proposals, query selection and layer-by-layer refinement of the points (new = previous + delta).

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

With ``horizon_row`` (h) both bases get one more term, a perspective curve: a lane on flat ground with a
constant curvature, X(Z) = X0 + theta Z + k Z^2 / 2 in the camera frame, images at row y = f H / Z + h as
x = a (y - h) + b + c / (y - h) (the lane model of LSTR), and near the horizon it sweeps sideways as no cubic
in y can (on the demo's labels, least-squares fits at the anchor rows keep 76 % of the curved lanes at the
lane F1's IoU with the cubic, 94 % with the cubic and this term; bench/lane_error.py). It did not teach
the demo's head the curves (convergence study, lane_perspective: lane F1 0.303 against 0.346), so it is off by default.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from perception.core.lane_coding import LANE_CLASSES, anchor_rows
from perception.models.heads.lane_marking import (
    MARKING_SEARCH,
    MarkingMap,
    classify_rows,
    fit_through_gaps,
    locate_on_rows,
    rescore_by_row_confidence,
    search_rows,
    snap_to_marking,
)
from perception.models.heads.query_decoder import QueryDecoderHead
from perception.models.heads.query_memory import MLP, zero_last_layer

SHAPE_DEGREE = 3
# The perspective term PERSPECTIVE_SCALE / (y - h), y and h in [0, 1] of the input height, its distance to the
# horizon clamped at PERSPECTIVE_MIN_GAP (rows above the horizon hold no lane): 0.09-2.5 over the rows below.
PERSPECTIVE_SCALE = 0.05
PERSPECTIVE_MIN_GAP = 0.02


def perspective_term(row_y: torch.Tensor, horizon_row: float) -> torch.Tensor:
    """row_y [...] in [0, 1] of the input height -> PERSPECTIVE_SCALE / (row_y - horizon), clamped: [...]."""
    return PERSPECTIVE_SCALE / (row_y - horizon_row).clamp(min=PERSPECTIVE_MIN_GAP)


def row_basis(num_points: int, degree: int = SHAPE_DEGREE) -> torch.Tensor:
    """[P, degree + 1]: powers of the row's y mapped to [-1, 1] (top to bottom)."""
    y = torch.linspace(-1.0, 1.0, num_points)
    return torch.stack([y ** k for k in range(degree + 1)], dim=1)


def relative_basis(row_y: torch.Tensor, token_y: torch.Tensor, degree: int = SHAPE_DEGREE) -> torch.Tensor:
    """row_y [P] and token_y [..., 1] in [0, 1] of the input height -> [..., P, degree + 1]: powers of
    (row y - token y), so coefficient 0 shifts the lane and the others turn and bend it about the token."""
    offset = row_y - token_y  # (..., P)
    return torch.stack([offset ** k for k in range(degree + 1)], dim=-1)


class LaneHead(QueryDecoderHead):
    prefix = "lanes"
    geometry = "points"

    def __init__(self, in_channels: int, num_classes: int = len(LANE_CLASSES), num_points: int = 24, dim: int = 64,
                 num_queries: int = 20, num_layers: int = 2, num_heads: int = 4, ffn_dim: int = 256,
                 levels: tuple[int, ...] = (1, 2, 3), memory_convs: int = 0, reference_sampling: bool = True,
                 marking_refinement: bool = False, snap_radius: int = 4, marking_channels: int = 32,
                 cross_attention: str = "dense", marking_search: str = "window", marking_offsets: bool = False,
                 gap_fit: bool = False, horizon_row: float | None = None, row_top: float = 0.0,
                 query_point_loss: bool = False, marking_context_dilations: tuple[int, ...] = (),
                 row_confidence_score: float = 0.0):
        # Each query reads the image at its lane's x on every anchor row (CLRNet-style line pooling).
        super().__init__(in_channels, num_classes, dim, num_queries, num_layers, num_heads, ffn_dim, levels,
                         memory_convs, reference_sampling, num_sample_points=num_points,
                         cross_attention=cross_attention)
        self.num_points = num_points
        self.horizon_row = horizon_row
        # Training only: also return the final layer's points before the marking search (``lanes.query_points``).
        self.query_point_loss = query_point_loss
        # y of the anchor rows in [0, 1] of the input height (lane_coding's rows, top to bottom, from row_top): (P,)
        self.register_buffer("row_y", torch.as_tensor(anchor_rows(num_points, 1.0, row_top), dtype=torch.float32),
                             persistent=False)
        basis = row_basis(num_points)
        if horizon_row is not None:  # (P, K + 1): the perspective curve beside the cubic
            basis = torch.cat([basis, perspective_term(self.row_y, horizon_row)[:, None]], dim=1)
        self.register_buffer("basis", basis, persistent=False)  # (P, K)
        shape_size = self.basis.shape[1]
        self.enc_points = MLP(dim, dim, shape_size, 3)
        self.query_pos = MLP(num_points, dim, dim, 2)
        self.point_heads = nn.ModuleList(MLP(dim, dim, shape_size, 3) for _ in range(num_layers))
        self.visibility_heads = nn.ModuleList(nn.Linear(dim, num_points) for _ in range(num_layers))
        if marking_refinement:
            # The final points snap to a stride-4 marking map (lane_marking.py); the map is also the
            # auxiliary mask the criterion trains (``lanes.dense.mask``).
            if marking_offsets and marking_search != "row":
                raise ValueError("marking_offsets needs marking_search='row'")
            if gap_fit and marking_search != "row":
                raise ValueError("gap_fit needs marking_search='row'")
            self.gap_fit = gap_fit  # the painted rows' corrections fitted across the gaps (fit_through_gaps)
            self.marking = MarkingMap(in_channels, marking_channels, offsets=marking_offsets,
                                      context_dilations=tuple(marking_context_dilations))
            # The logit of keeping the decoder's x (window / row); the kernel search keeps it through its prior.
            self.stay_logit = nn.Parameter(torch.zeros(())) if marking_search != "kernel" else None
            self.snap_radius = snap_radius
            if marking_search not in MARKING_SEARCH:
                raise ValueError(f"marking_search must be one of {MARKING_SEARCH}, got {marking_search!r}")
            if row_confidence_score and marking_search != "kernel":
                raise ValueError("row_confidence_score needs marking_search='kernel'")
            # Inference only: the class score times the rows' confidence to this power (rescore_by_row_confidence).
            self.row_confidence_score = row_confidence_score
            self.marking_search = marking_search
            # "row" / "kernel": the Gaussian prior's width in map cells, learned (4 cells = 16 input px to start);
            # None: window.
            self.log_sigma = nn.Parameter(torch.tensor(math.log(4.0))) if marking_search != "window" else None
            self.log_sharpness = nn.Parameter(torch.zeros(())) if marking_offsets else None
            # "kernel": the final query's 1x1 kernel on the map's features (zero at the start: the row search).
            self.row_kernel = nn.Linear(dim, marking_channels) if marking_search == "kernel" else None
            if self.row_kernel is not None:
                nn.init.zeros_(self.row_kernel.weight)
                nn.init.zeros_(self.row_kernel.bias)
        else:
            # Training only: lane markings as a mask on the finest memory level (a linear probe of its
            # features, the same features the reference sampler reads), absent from the exported graph.
            self.marking = None
            self.mask_probe = nn.Conv2d(dim, 1, 1)
        for mlp in [self.enc_points, *self.point_heads]:
            zero_last_layer(mlp)

    def propose(self, features: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """Every token proposes a lane through its own centre (anchors [B or 1,N,4] cxcywh): (B, N, P)."""
        row_y = self.row_y.to(features.dtype)
        shape = relative_basis(row_y, anchors[..., 1:2], SHAPE_DEGREE)  # (B or 1, N, P, K)
        if self.horizon_row is not None:  # the perspective curve through the token's own row: 0 there, (.., P, 1)
            curve = perspective_term(row_y, self.horizon_row) - perspective_term(anchors[..., 1:2], self.horizon_row)
            shape = torch.cat([shape, curve[..., None]], dim=-1)
        return anchors[..., :1] + (shape @ self.enc_points(features)[..., None]).squeeze(-1)

    def position(self, reference: torch.Tensor) -> torch.Tensor:
        # x may leave [0, 1] where a lane leaves the image; the position MLP sees it bounded.
        return self.query_pos(reference.clamp(-0.5, 1.5))

    def sample_points(self, reference: torch.Tensor) -> torch.Tensor:
        rows = self.row_y.to(reference.dtype).expand_as(reference)  # (B, Q, P)
        return torch.stack([reference, rows], -1)  # (B, Q, P, 2): x and y of each row's point

    def attention_box(self, reference: torch.Tensor) -> torch.Tensor:
        """The box [B,Q,4] cxcywh spanned by the lane's points inside the image, over all anchor rows."""
        xs = reference.clamp(0.0, 1.0)  # (B, Q, P)
        left, right = xs.min(-1).values, xs.max(-1).values
        top, bottom = self.row_y[0].to(xs.dtype), self.row_y[-1].to(xs.dtype)
        width = (right - left).clamp(min=0.05)  # a vertical lane still reads around itself
        cy, height = ((top + bottom) / 2).expand_as(left), (bottom - top).expand_as(left)
        return torch.stack([(left + right) / 2, cy, width, height], dim=-1)

    def refine(self, index: int, queries: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return reference + self.point_heads[index](queries) @ self.basis.T

    def extra_outputs(self, index: int, queries: torch.Tensor, points: torch.Tensor,
                      prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.visibility": self.visibility_heads[index](queries)}

    def dense_extras(self, finest: torch.Tensor, features: torch.Tensor,
                     anchors: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.marking is not None:  # the marking map is the mask (forward)
            return {}
        return {"lanes.dense.mask": self.mask_probe(finest)}  # (B, 1, h, w) logits, finest level

    def input_levels(self) -> tuple[int, ...]:
        """The memory's levels, and stride 4 for the marking map."""
        return tuple(sorted({*self.memory.levels, *((0,) if self.marking is not None else ())}))

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Returns (B images, Q queries, C lane classes, P rows; see lane_coding):

        lanes.logits [B,Q,C]      class logits (sigmoid; no background class)
        lanes.points [B,Q,P]      x at each anchor row, normalised by the input width (outside [0, 1]: off the
                                  image at that row)
        lanes.visibility [B,Q,P]  logit that the lane crosses the row inside the image
        In training also ``lanes.aux{i}.*`` per earlier decoder layer, ``lanes.enc.{logits,points}`` and
        ``lanes.dense.{logits,features,anchors}`` (every token, for the dense loss) and ``lanes.dense.mask``
        [B,1,h,w] (lane-marking logits on the finest memory level, for the auxiliary mask loss; with
        ``marking_refinement`` the stride-4 marking map the final points were snapped to) and, with
        ``marking_search="kernel"``, ``lanes.row_logits`` [B,Q,P,W/4] (each row's cell scores, lane_marking.py);
        with ``query_point_loss`` ``lanes.query_points`` [B,Q,P] (the final layer's x before the marking search).
        With ``row_confidence_score`` (inference only) ``lanes.logits`` are rescored by the rows' confidence.
        """
        outputs, queries = self.decode(levels)
        if self.marking is not None:
            if self.training and self.query_point_loss:
                outputs["lanes.query_points"] = outputs["lanes.points"]  # (B, Q, P), before the search moves them
            marking, features = self.marking(levels[0])  # (B, 1, H/4, W/4) logits (+ offsets), (B, C, ...)
            if self.marking_search == "kernel":
                outputs["lanes.points"], row_logits = classify_rows(
                    outputs["lanes.points"], self.row_y, marking, features, self.row_kernel(queries), self.log_sigma)
                if self.training:
                    outputs["lanes.row_logits"] = row_logits  # (B, Q, P, W/4), for the per-row cross-entropy
                elif self.row_confidence_score:
                    outputs["lanes.logits"] = rescore_by_row_confidence(
                        outputs["lanes.logits"], row_logits, outputs["lanes.visibility"], outputs["lanes.points"],
                        self.row_confidence_score)
            elif self.marking_search == "row" and self.gap_fit:
                found, evidence = search_rows(outputs["lanes.points"], self.row_y, marking, self.log_sigma,
                                              self.stay_logit, self.log_sharpness)
                outputs["lanes.points"] = fit_through_gaps(outputs["lanes.points"], found, evidence, self.row_y)
            elif self.marking_search == "row":
                outputs["lanes.points"] = locate_on_rows(outputs["lanes.points"], self.row_y, marking,
                                                         self.log_sigma, self.stay_logit, self.log_sharpness)
            else:
                outputs["lanes.points"] = snap_to_marking(outputs["lanes.points"], self.row_y, marking,
                                                          self.snap_radius, self.stay_logit)
            if self.training:
                outputs["lanes.dense.mask"] = marking[:, :1]
        return outputs
