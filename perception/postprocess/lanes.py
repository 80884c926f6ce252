"""Lane outputs -> lanes in original-image pixels (NMS-free: one lane per confident query)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from perception.core.lane_coding import MIN_VISIBLE_ROWS, decode_lane
from perception.core.lane_overlap import lane_overlap_iou, row_half_widths
from perception.postprocess.lane_fit import robust_line_fit


@dataclass
class ImageLanes:
    polylines: list[np.ndarray]  # each [K,2] (x, y) original px, bottom (near) first
    labels: np.ndarray  # [N] index into LANE_CLASSES
    scores: np.ndarray  # [N]


def decode_lanes(outputs: dict[str, torch.Tensor], index: int, input_size: tuple[int, int], affine: np.ndarray,
                 score_threshold: float = 0.3, visibility_threshold: float = 0.5,
                 line_fit_px: float | None = None, nms_iou: float | None = None,
                 fit_horizon_row: float | None = None, row_top: float | None = None) -> ImageLanes:
    """Lanes of image ``index`` of a batch; ``affine`` [3,3] maps original px to input px. ``line_fit_px``: put
    each lane's rows on a robust straight line, Huber scale in input px (``postprocess.lane_line_fit_px``).
    ``nms_iou``: drop a lane that overlaps a higher-scored kept one by this ``lane_overlap_iou`` or more
    (``postprocess.lane_nms_iou``); None: every query above the threshold is a lane. ``fit_horizon_row`` (in
    [0, 1] of the input height): the fit is the perspective curve through that horizon
    (``postprocess.lane_fit_horizon_row``). ``row_top``: where the head's anchor rows start, a fraction of the input
    height (``postprocess.lane_row_top``, set from ``model.heads.lanes.row_top``; None: 0)."""
    row_top = row_top or 0.0
    probability = outputs["lanes.logits"][index].float().sigmoid()  # (Q, C)
    scores, labels = probability.max(dim=-1)
    points = outputs["lanes.points"][index].float().numpy()  # (Q, P)
    # A row is drawn where the head says the lane crosses it and its x lies inside the image.
    visible = (outputs["lanes.visibility"][index].float().sigmoid() > visibility_threshold).numpy()
    visible &= (points >= 0.0) & (points <= 1.0)
    inverse = np.linalg.inv(affine)
    candidates = [q for q in np.argsort(-scores.numpy()) if scores[q] > score_threshold
                  and visible[q].sum() >= MIN_VISIBLE_ROWS]
    if nms_iou is not None:
        candidates = suppress_duplicates(points, visible, candidates, input_size, nms_iou, row_top)
    polylines, kept_labels, kept_scores = [], [], []
    horizon_y = None if fit_horizon_row is None else fit_horizon_row * input_size[0]  # input px
    for q in candidates:
        lane = decode_lane(points[q], visible[q], input_size, row_top)  # input px
        if line_fit_px is not None:
            lane = robust_line_fit(lane, line_fit_px, horizon_y)
        polylines.append(lane @ inverse[:2, :2].T + inverse[:2, 2])
        kept_labels.append(int(labels[q]))
        kept_scores.append(float(scores[q]))
    return ImageLanes(polylines, np.asarray(kept_labels, np.int64), np.asarray(kept_scores, np.float32))


def suppress_duplicates(points: np.ndarray, visible: np.ndarray, order: list[int], input_size: tuple[int, int],
                        iou_threshold: float, row_top: float = 0.0) -> list[int]:
    """Greedy NMS over lanes (x [Q,P] normalised, visible [Q,P]) in ``order`` (best first): a lane is kept unless
    it overlaps a kept one by ``lane_overlap_iou`` >= ``iou_threshold``, measured with the kept lane's widths."""
    if len(order) < 2:
        return list(order)
    xs = torch.from_numpy(points[order]).double()
    seen = torch.from_numpy(visible[order])
    widths = row_half_widths(xs, seen, input_size, row_top)
    iou = lane_overlap_iou(xs, seen, xs, seen, widths).numpy()  # (K, K): [a, kept b]
    kept: list[int] = []
    for k in range(len(order)):
        if all(iou[k, j] < iou_threshold for j in kept):
            kept.append(k)
    return [order[k] for k in kept]
