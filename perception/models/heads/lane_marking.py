"""Lane points snapped to the painted markings: a stride-4 marking map and a per-row soft arg-max.

Why: measured on the demo checkpoint (held-out BDD100K-format frames), even the best of the lane
head's 20 queries was a median 19 px (of 640) off each labelled lane, while CULane's F1 asks for
about 4 px (IoU >= 0.5 of 30 px wide lines at 1640). The queries find the lanes; a decoder reading
stride-8 tokens does not place them to a few pixels. A convolutional marking map at stride 4 does
what CNN lane detectors (SCNN, LaneAF) do well, and the query's points then move to the marking:

- ``MarkingMap``: FPN stride 4 -> two 3x3 conv blocks -> one logit per cell [B,1,H/4,W/4] that a
  lane marking passes through (trained by the lane criterion's mask loss, ``lanes.dense.mask``).
- ``snap_to_marking``: at each anchor row, the map is read at 4R + 1 offsets half a cell apart within
  R cells of the query's x (bilinear ``grid_sample``); a softmax over them plus one learned "stay" logit at offset 0
  gives the row's shift (a soft arg-max, differentiable, sub-cell). Where no marking is near (dashes'
  gaps, rows past the painted end), the stay logit wins and the point keeps the decoder's x.

- ``locate_on_rows`` (``marking_search="row"``): the same soft arg-max over the whole row of the map,
  weighted by a Gaussian prior around the query's x (learned width, 4 cells to start) instead of a hard
  window: a near marking wins over a far one, a far one is still reachable, and the stay logit keeps
  x where the row shows no marking (or the point lies off the image). With ``marking_offsets`` the map also
  says where in each 4-px cell the marking lies (a tanh-bounded offset, trained end to end through the
  points) and a learned factor sharpens its logits: a cell is 14.6 px of CULane's 1640-px canvas, where
  IoU 0.5 of 30-px lines allows about 10.

- ``fit_through_gaps`` (``gap_fit``, with ``marking_search="row"``): the corrections found on painted rows,
  fitted as offset + slope over the rows, move the rows without paint too (dashed markings' gaps).

- ``classify_rows`` (``marking_search="kernel"``): each query also scores every cell of each row with its
  own 1x1 kernel on the map's features (CondLaneNet's query-conditioned kernels), trained by a per-row
  cross-entropy on the labelled cell (UFLD's row-wise classification).

- ``rescore_by_row_confidence`` (``row_confidence_score``, with ``marking_search="kernel"``): at inference a lane's
  class probability p becomes p^(1 - w) c^w, c the mean over its drawn rows of how sure each row's cell distribution
  is (its largest probability): a lane whose rows the map cannot place is more often a near miss than one whose rows
  it places (FCOS's centre-ness times the class score, for lanes).

Standard ONNX only (Conv, GridSample, MatMul, Softmax, ReduceSum, ReduceMax): TensorRT runs it without plugins.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MARKING_SEARCH = ("window", "row", "kernel")  # how the final points move to the map (snap, row search, row kernels)


class ContextBlock(nn.Module):
    """A residual dilated 3x3 conv block [B,C,h,w] -> [B,C,h,w]: ReLU(x + GN(conv_d(x))) (ResNet's block), the
    residual branch zero at the start (its norm's scale is 0, which still receives a gradient), so on the plain
    convs' non-negative output a map with these blocks starts as the map without them."""

    def __init__(self, channels: int, dilation: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation, bias=False)
        self.norm = nn.GroupNorm(groups, channels)
        nn.init.zeros_(self.norm.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.norm(self.conv(x)))


class MarkingMap(nn.Module):
    """FPN stride-4 level [B,C,H/4,W/4] -> lane-marking logits [B,1,H/4,W/4]; with ``offsets`` also channel 1:
    where in its cell the marking lies, tanh-bounded to +-1 cell from the centre (zero at the start; CenterNet's
    and CondLaneNet's sub-cell offset), so [B,2,H/4,W/4].

    ``context_dilations``: residual dilated 3x3 blocks after the two plain ones (``ContextBlock``). The map is
    trained on the labelled lanes, which run through the dashes' gaps and behind the vehicles that hide them, and
    two 3x3 convs see 5 cells (20 input px) of that; dilations (2, 4, 8) widen the view to 33 cells, the lane's
    painted stretches and the road's edge around a hidden one (RESA's and SCNN's long-range context, as convs)."""

    def __init__(self, in_channels: int, channels: int = 32, offsets: bool = False,
                 context_dilations: tuple[int, ...] = ()):
        super().__init__()
        groups = min(8, channels // 4)
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False), nn.GroupNorm(groups, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.GroupNorm(groups, channels), nn.ReLU(),
            *(ContextBlock(channels, d, groups) for d in context_dilations))
        self.classifier = nn.Conv2d(channels, 1, 1)
        nn.init.constant_(self.classifier.bias, -4.0)  # markings cover a few % of the cells
        self.offset = nn.Conv2d(channels, 1, 1) if offsets else None
        if self.offset is not None:
            nn.init.zeros_(self.offset.weight)
            nn.init.zeros_(self.offset.bias)

    def forward(self, stride4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the map [B,1 or 2,H/4,W/4], its features [B,channels,H/4,W/4] for the query kernels of classify_rows)."""
        features = self.body(stride4)
        if self.offset is None:
            return self.classifier(features), features
        return torch.cat([self.classifier(features), torch.tanh(self.offset(features))], dim=1), features


def snap_to_marking(points: torch.Tensor, row_y: torch.Tensor, marking: torch.Tensor, radius: int,
                    stay_logit: torch.Tensor) -> torch.Tensor:
    """Move each row's x to the marking nearby.

    points [B,Q,P]: x at the anchor rows, normalised by the input width; row_y [P]: the rows' y in
    [0, 1]; marking [B,1,h,w] logits; radius: cells searched on each side; stay_logit: scalar logit
    of keeping x. Returns the snapped x [B,Q,P].
    """
    batch, queries, rows = points.shape
    half_cell = 0.5 / marking.shape[-1]  # half a marking-map cell in normalised x: sub-cell peaks are not missed
    offsets = torch.arange(-2 * radius, 2 * radius + 1, device=points.device, dtype=points.dtype) * half_cell  # (S,)
    xs = points[..., None] + offsets  # (B, Q, P, S)
    ys = row_y.to(points.dtype)[None, None, :, None].expand_as(xs)
    grid = torch.stack([xs, ys], dim=-1).reshape(batch, queries, -1, 2) * 2 - 1  # (B, Q, P*S, 2) in [-1, 1]
    sampled = F.grid_sample(marking.to(points.dtype), grid, mode="bilinear", padding_mode="border",
                            align_corners=False)  # (B, 1, Q, P*S)
    logits = sampled.reshape(batch, queries, rows, -1)  # (B, Q, P, S)
    stay = stay_logit.to(points.dtype).expand(batch, queries, rows, 1)
    weights = torch.cat([logits, stay], dim=-1).softmax(dim=-1)  # (B, Q, P, S + 1); the last: stay at offset 0
    return points + (weights[..., :-1] * offsets).sum(-1)


def read_anchor_rows(maps: torch.Tensor, row_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """maps [B,K,h,w] read at every cell centre of each anchor row (row_y [P] in [0, 1] of the height; bilinear
    between the map's rows) -> (cell centres [w] normalised by the width, values [B,K,P,w])."""
    batch, _, _, width = maps.shape
    rows = row_y.shape[0]
    centres = (torch.arange(width, device=maps.device, dtype=maps.dtype) + 0.5) / width  # (w,)
    grid_x = centres[None, None, :].expand(batch, rows, width)
    grid_y = row_y.to(maps.dtype)[None, :, None].expand(batch, rows, width)
    grid = torch.stack([grid_x, grid_y], dim=-1) * 2 - 1  # (B, P, w, 2) in [-1, 1]
    return centres, F.grid_sample(maps, grid, mode="bilinear", padding_mode="border", align_corners=False)


def search_rows(points: torch.Tensor, row_y: torch.Tensor, marking: torch.Tensor, log_sigma: torch.Tensor,
                stay_logit: torch.Tensor, log_sharpness: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The marking most likely under a Gaussian prior around each row's x, and how sure the row is of it.

    points [B,Q,P]: x at the anchor rows, normalised by the input width; row_y [P]: the rows' y in [0, 1];
    marking [B,1,h,w] logits, or [B,2,h,w] logits and sub-cell offsets (cells, MarkingMap(offsets=True));
    log_sigma: scalar log of the prior's width in map cells; stay_logit: scalar logit of "no marking here";
    log_sharpness: optional scalar log of a factor on the map's logits (a sharper soft arg-max). Returns
    (x of the marking [B,Q,P]: the expectation over the row's w cells (centre + offset), evidence [B,Q,P] in
    (0, 1): the share of the softmax over the cells and the stay logit that the cells take).
    """
    width = marking.shape[-1]
    centres, sampled = read_anchor_rows(marking.to(points.dtype), row_y)  # (w,), (B, 1 or 2, P, w)
    row_logits, positions = sampled[:, :1], centres  # (B, 1, P, w), (w,)
    if sampled.shape[1] == 2:  # where in each cell the marking lies
        positions = centres + sampled[:, 1:] / width  # (B, 1, P, w)
    if log_sharpness is not None:
        row_logits = row_logits * log_sharpness.to(points.dtype).exp()
    distance = (centres - points[..., None]) * (width / log_sigma.to(points.dtype).exp())  # (B, Q, P, w), sigmas
    logits = row_logits - 0.5 * distance.square()  # broadcast over queries
    found = (logits.softmax(dim=-1) * positions).sum(-1)  # (B, Q, P)
    evidence = torch.sigmoid(torch.logsumexp(logits, dim=-1) - stay_logit.to(points.dtype))
    return found, evidence


def locate_on_rows(points: torch.Tensor, row_y: torch.Tensor, marking: torch.Tensor, log_sigma: torch.Tensor,
                   stay_logit: torch.Tensor, log_sharpness: torch.Tensor | None = None) -> torch.Tensor:
    """Move each row's x to the marking most likely under a Gaussian prior around it (``search_rows``); the
    stay logit keeps x where the row shows no marking. Returns x [B,Q,P]: the softmax over the row's cells
    and "stay" (= evidence x the marking's x + (1 - evidence) x the row's own x)."""
    found, evidence = search_rows(points, row_y, marking, log_sigma, stay_logit, log_sharpness)
    return evidence * found + (1 - evidence) * points


GAP_FIT_RIDGE = 0.5  # rows' worth of evidence for "no correction": a lane with no paint found keeps its x


def fit_through_gaps(points: torch.Tensor, found: torch.Tensor, evidence: torch.Tensor,
                     row_y: torch.Tensor) -> torch.Tensor:
    """Carry the corrections the painted rows found across the rows without paint.

    Dashed lane dividers are painted on a third of their length (the demo's 3 m dash, 6 m gap; CULane's
    and BDD100K's labels, like ours, run through the gaps), so on most rows ``search_rows`` finds nothing
    and ``locate_on_rows`` keeps the decoder's x, a cell or more off. Here the correction (marking x -
    decoder x) is fitted over the rows as offset + slope in y by least squares weighted by each row's
    evidence, with a ridge of ``GAP_FIT_RIDGE`` rows towards no correction (a closed-form 2x2 solve:
    elementwise ops only, no matrix inverse in the exported graph). A row keeps its own marking by its
    evidence and takes the fitted line otherwise.

    points, found, evidence [B,Q,P] (``search_rows``); row_y [P] in [0, 1]. Returns x [B,Q,P].
    """
    t = (row_y.to(points.dtype) * 2 - 1)  # (P,) in [-1, 1]: the slope's lever arm
    correction = found - points
    s0 = evidence.sum(-1) + GAP_FIT_RIDGE
    s1 = (evidence * t).sum(-1)
    s2 = (evidence * t * t).sum(-1) + GAP_FIT_RIDGE
    r0 = (evidence * correction).sum(-1)
    r1 = (evidence * t * correction).sum(-1)
    det = s0 * s2 - s1 * s1  # >= ridge^2 > 0 (Cauchy-Schwarz)
    offset = (s2 * r0 - s1 * r1) / det
    slope = (s0 * r1 - s1 * r0) / det
    fitted = points + offset[..., None] + slope[..., None] * t
    return evidence * found + (1 - evidence) * fitted


def classify_rows(points: torch.Tensor, row_y: torch.Tensor, marking: torch.Tensor, features: torch.Tensor,
                  kernels: torch.Tensor, log_sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query and anchor row, a distribution over the row's map cells; x is its expectation.

    Row-wise classification (UFLD, CondLaneNet) with a query-conditioned kernel: cell c of row p scores
    map[p, c] + <kernel_q, features[:, p, c]> - 0.5 ((c - x_q) / sigma)^2, so the shared marking map says
    where paint is, the query's own 1x1 kernel picks its lane among the markings (its colour, dash pattern,
    side), and the prior keeps it near the decoder's x. Trained by a per-row cross-entropy on the true
    cell (``lane_row_ce``), which the soft arg-max alone (``locate_on_rows``) never sees: there the L1 on
    the expectation can be met by a flat distribution centred on the lane.

    points [B,Q,P]: x at the anchor rows, normalised by the input width; row_y [P]: the rows' y in [0, 1];
    marking [B,1,h,w] logits; features [B,C,h,w] (the map's own features); kernels [B,Q,C]; log_sigma:
    scalar log of the prior's width in map cells. Returns x [B,Q,P] and the row logits [B,Q,P,w].
    """
    batch, queries, rows = points.shape
    width = marking.shape[-1]
    centres, sampled = read_anchor_rows(torch.cat([marking[:, :1], features], dim=1).to(points.dtype),
                                        row_y)  # (w,), (B, 1 + C, P, w)
    map_logits = sampled[:, :1]  # (B, 1, P, w), broadcast over queries
    row_features = sampled[:, 1:].flatten(2)  # (B, C, P*w)
    query_logits = (kernels.to(points.dtype) @ row_features).reshape(batch, queries, rows, width)  # MatMul
    distance = (centres - points[..., None]) * (width / log_sigma.to(points.dtype).exp())  # (B, Q, P, w), sigmas
    logits = map_logits + query_logits - 0.5 * distance.square()
    return (logits.softmax(dim=-1) * centres).sum(-1), logits


PROBABILITY_FLOOR = 1e-6  # rescored probabilities stay in [floor, 1 - floor]: finite logits


def rescore_by_row_confidence(logits: torch.Tensor, row_logits: torch.Tensor, visibility_logits: torch.Tensor,
                              points: torch.Tensor, weight: float) -> torch.Tensor:
    """Lane class logits [B,Q,C] -> the logits of p^(1 - weight) * c^weight, p = sigmoid(logits).

    c [B,Q]: the mean, over the rows a lane is drawn through (visibility logit > 0, i.e. the post-processing's 0.5,
    and x inside the image), of the largest probability of the row's cell distribution (``classify_rows``'s
    row_logits [B,Q,P,w]); 0 for a lane with no such row. Why: on run 17's held-out lanes most false positives were
    near misses (0.1-0.5 IoU from a labelled lane), mostly of curved lanes whose far rows the map could not place,
    and the class score, read from the query before the search, does not know it. points [B,Q,P] (normalised x),
    visibility_logits [B,Q,P]; weight in (0, 1)."""
    confidence = row_logits.softmax(dim=-1).amax(dim=-1)  # (B, Q, P)
    drawn = ((visibility_logits > 0) & (points >= 0) & (points <= 1)).to(confidence.dtype)  # (B, Q, P)
    mean = (confidence * drawn).sum(-1) / drawn.sum(-1).clamp(min=1.0)  # (B, Q)
    log_p = (1 - weight) * F.logsigmoid(logits) + weight * mean.clamp(min=PROBABILITY_FLOOR).log()[..., None]
    p = log_p.exp().clamp(PROBABILITY_FLOOR, 1 - PROBABILITY_FLOOR)
    return p.log() - (1 - p).log()
