"""CULane-style lane F1, accumulated over a split.

Every lane (a polyline in original-image pixels) is drawn as a ``LINE_WIDTH`` px wide line on a
canvas at the reference resolution (the image scaled to ``REFERENCE_WIDTH`` px wide, CULane's
1640x590 convention: 30 px at width 1640). Predictions and ground truth of an image are matched
one-to-one by the Hungarian algorithm on their mask IoU; a match with IoU >= ``IOU_THRESHOLD``
is a true positive. F1 = 2 TP / (2 TP + FP + FN) over all images.
"""

from __future__ import annotations

import cv2
import numpy as np
from scipy.optimize import linear_sum_assignment

REFERENCE_WIDTH = 1640
LINE_WIDTH = 30
IOU_THRESHOLD = 0.5


def lane_masks(lanes: list[np.ndarray], image_size: tuple[int, int], reference_width: int = REFERENCE_WIDTH,
               line_width: int = LINE_WIDTH) -> np.ndarray:
    """Lanes (each [N,2] x, y original px) -> bool [L, h*w] masks at the reference resolution."""
    width, height = image_size
    scale = reference_width / width
    canvas_size = (int(round(height * scale)), reference_width)
    masks = np.zeros((len(lanes), canvas_size[0] * canvas_size[1]), bool)
    for i, lane in enumerate(lanes):
        canvas = np.zeros(canvas_size, np.uint8)
        points = np.round(np.asarray(lane, np.float64).reshape(-1, 2) * scale * 8).astype(np.int32)
        if len(points) >= 2:
            cv2.polylines(canvas, [points], False, 1, thickness=line_width, lineType=cv2.LINE_8, shift=3)
        masks[i] = canvas.reshape(-1).astype(bool)
    return masks


def lane_iou_matrix(predictions: list[np.ndarray], ground_truth: list[np.ndarray],
                    image_size: tuple[int, int]) -> np.ndarray:
    """IoU [P, G] of the drawn lanes."""
    if not predictions or not ground_truth:
        return np.zeros((len(predictions), len(ground_truth)))
    pred = lane_masks(predictions, image_size).astype(np.float32)
    truth = lane_masks(ground_truth, image_size).astype(np.float32)
    intersection = pred @ truth.T
    union = pred.sum(1)[:, None] + truth.sum(1)[None] - intersection
    return intersection / np.maximum(union, 1.0)


def matched_truths(iou: np.ndarray) -> np.ndarray:
    """bool [G]: the labelled lanes matched one-to-one (Hungarian on IoU [P, G]) at IoU >= ``IOU_THRESHOLD``."""
    matched = np.zeros(iou.shape[1], bool)
    if iou.size:
        rows, cols = linear_sum_assignment(-iou)
        matched[cols[iou[rows, cols] >= IOU_THRESHOLD]] = True
    return matched


def match_lanes(predictions: list[np.ndarray], ground_truth: list[np.ndarray],
                image_size: tuple[int, int]) -> tuple[int, int, int]:
    """(TP, FP, FN) of one image."""
    tp = int(matched_truths(lane_iou_matrix(predictions, ground_truth, image_size)).sum())
    return tp, len(predictions) - tp, len(ground_truth) - tp


class LaneF1:
    """Accumulates TP / FP / FN over images; ``compute`` gives precision, recall and F1."""

    def __init__(self):
        self.tp = self.fp = self.fn = 0

    def update(self, predictions: list[np.ndarray], ground_truth: list[np.ndarray],
               image_size: tuple[int, int]) -> None:
        tp, fp, fn = match_lanes(predictions, ground_truth, image_size)
        self.add(tp, fp, fn)

    def add(self, tp: int, fp: int, fn: int) -> None:
        self.tp, self.fp, self.fn = self.tp + tp, self.fp + fp, self.fn + fn

    def compute(self) -> dict[str, float]:
        if self.tp + self.fp + self.fn == 0:  # no lanes predicted nor labelled: undefined
            return {"F1": float("nan"), "precision": float("nan"), "recall": float("nan")}
        precision = self.tp / max(self.tp + self.fp, 1)
        recall = self.tp / max(self.tp + self.fn, 1)
        f1 = 2 * self.tp / max(2 * self.tp + self.fp + self.fn, 1)
        return {"F1": f1, "precision": precision, "recall": recall}
