"""Overlap of two lanes at the row anchors, as the lane F1 sees it (lines drawn 30 px wide at 1640 px).

The F1 (perception.metrics.lanes) draws every lane 30 px wide on a canvas 1640 px wide and matches lanes
by the IoU of those masks. At the network's row anchors that is, per row, the overlap of two horizontal
segments: a line of half-width e crossing a row at slant theta from the vertical covers e / cos(theta) of
it. Summed over the rows, overlap over union approximates the mask IoU without drawing anything, cheap
enough for every query against every lane in a training step (one-to-many class targets) and for lane
NMS in post-processing. Lanes are x [.., P] at the P anchor rows, normalised by the input width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perception.core.lane_coding import row_spacing

METRIC_HALF_WIDTH = 15.0 / 1640.0  # half of CULane's 30-px line at 1640 px wide, in units of the image width
MAX_SLANT_WIDENING = 8.0  # a nearly horizontal lane crosses few rows; cap its per-row width there


def row_half_widths(xs: torch.Tensor, visible: torch.Tensor, input_size: tuple[int, int],
                    row_top: float = 0.0) -> torch.Tensor:
    """Per-row horizontal half-width [M,P] (units of the input width) of lanes xs [M,P] drawn as the metric
    draws them. The slant at a row comes from the lane's neighbouring visible rows; rows where the lane is
    not visible get its mean over the visible ones (a partner lane visible there is measured with it).
    ``row_top``: where the anchor rows start (perception.core.lane_coding)."""
    height, width = input_size
    num_rows = xs.shape[-1]
    visible = visible.to(torch.bool)
    both = (visible[:, 1:] & visible[:, :-1]).to(xs.dtype)  # (M, P-1): both rows of a step visible
    step = (xs[:, 1:] - xs[:, :-1]).abs() * both
    total = F.pad(step, (1, 0)) + F.pad(step, (0, 1))  # steps on either side of each row
    count = F.pad(both, (1, 0)) + F.pad(both, (0, 1))
    slope = total / count.clamp(min=1) * width / row_spacing(num_rows, height, row_top)  # dx / dy in pixels
    half = METRIC_HALF_WIDTH * torch.sqrt(1.0 + slope * slope).clamp(max=MAX_SLANT_WIDENING)
    seen = visible.to(xs.dtype)
    mean = (half * seen).sum(-1, keepdim=True) / seen.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(visible, half, mean.expand_as(half))


def lane_overlap_iou(xs_a: torch.Tensor, visible_a: torch.Tensor, xs_b: torch.Tensor, visible_b: torch.Tensor,
                     half_width_b: torch.Tensor) -> torch.Tensor:
    """IoU [A,B] of lanes a (xs [A,P], visible [A,P]) with lanes b ([B,P]), both drawn with b's per-row
    half-widths ``half_width_b`` [B,P] (``row_half_widths``): a row where both are visible adds the overlap
    of the two segments to the intersection; every visible row adds its segment to the union."""
    return paired_lane_overlap_iou(xs_a[:, None], visible_a[:, None], xs_b[None], visible_b[None],
                                   half_width_b[None])


def paired_lane_overlap_iou(xs_a: torch.Tensor, visible_a: torch.Tensor, xs_b: torch.Tensor, visible_b: torch.Tensor,
                            half_width_b: torch.Tensor) -> torch.Tensor:
    """IoU [K] of lane a[k] with lane b[k] (xs, visible, b's half-widths all [K,P], or any shapes that broadcast
    to one: ``lane_overlap_iou`` passes [A,1,P] against [1,B,P]), drawn with b's half-widths."""
    va, vb = visible_a.to(xs_a.dtype), visible_b.to(xs_a.dtype)
    segment = 2.0 * half_width_b
    intersection = ((segment - (xs_a - xs_b).abs()).clamp(min=0.0) * va * vb).sum(-1)
    union = (segment * va).sum(-1) + (segment * vb).sum(-1) - intersection
    return intersection / union.clamp(min=1e-9)
