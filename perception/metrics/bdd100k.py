"""BDD100K's own lane and drivable-area metrics, implemented from the published definitions.

The ``bdd100k`` toolkit (``bdd100k/eval/lane.py``, ``bdd100k/eval/seg.py``) pulls in ``scalabel`` and
``scikit-image`` and is not installable beside our pins, so these follow its definitions:

- **Lane marking F-score at a pixel bound** (``F1_pix1/2/5``, after DAVIS's boundary measure): lanes
  are rasterised as 1-px polylines at the original resolution; a ground-truth pixel is recalled
  when a predicted pixel lies within ``bound`` px (a disk of that radius), a predicted pixel is
  precise when a ground-truth pixel does. Per frame F = 2PR / (P + R) with the toolkit's
  conventions for empty masks (both empty: 1; one empty: 0), averaged over frames. Ours is the
  foreground (category-agnostic) score: the toolkit also splits by direction, style and category,
  which our lane head does not predict.
- **Drivable mIoU**: per-class IoU from a confusion matrix summed over every pixel of the split,
  averaged over the classes present. BDD100K has three classes (direct, alternative, background);
  our head predicts drivable (direct or alternative) vs background, so the mean is over those two:
  ``BinaryIoU.compute()["mIoU"]`` (``drivable/mIoU_bdd100k`` in the metrics).
"""

from __future__ import annotations

import cv2
import numpy as np

BOUND_PIXELS = (1, 2, 5)


def disk(radius: int) -> np.ndarray:
    """uint8 [2r+1, 2r+1] with 1 where x^2 + y^2 <= r^2 (scikit-image's ``morphology.disk``)."""
    grid = np.arange(-radius, radius + 1)
    return ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius**2).astype(np.uint8)


def rasterise_lanes(lanes: list[np.ndarray], image_size: tuple[int, int]) -> np.ndarray:
    """Lanes (each [N,2] x, y original px) -> bool [H, W] mask of 1-px polylines; ``image_size`` (width, height)."""
    width, height = image_size
    canvas = np.zeros((height, width), np.uint8)
    for lane in lanes:
        points = np.round(np.asarray(lane, np.float64).reshape(-1, 2)).astype(np.int32)
        if len(points) >= 2:
            cv2.polylines(canvas, [points.reshape(-1, 1, 2)], False, 1, thickness=1, lineType=cv2.LINE_8)
        elif len(points) == 1:
            x, y = points[0]
            if 0 <= x < width and 0 <= y < height:
                canvas[y, x] = 1
    return canvas.astype(bool)


def boundary_fscore(truth: np.ndarray, prediction: np.ndarray, bound: int) -> float:
    """F-score of two bool masks where a pixel counts as matched within ``bound`` px (BDD100K lane eval)."""
    n_truth, n_prediction = int(truth.sum()), int(prediction.sum())
    if n_truth == 0 and n_prediction == 0:
        return 1.0
    if n_truth == 0 or n_prediction == 0:  # precision 0 or recall 0
        return 0.0
    kernel = disk(bound)
    truth_dilated = cv2.dilate(truth.astype(np.uint8), kernel).astype(bool)
    prediction_dilated = cv2.dilate(prediction.astype(np.uint8), kernel).astype(bool)
    precision = float((prediction & truth_dilated).sum()) / n_prediction
    recall = float((truth & prediction_dilated).sum()) / n_truth
    return 0.0 if precision + recall == 0 else 2.0 * precision * recall / (precision + recall)


def lane_fscores(predictions: list[np.ndarray], truth: list[np.ndarray], image_size: tuple[int, int],
                 bounds: tuple[int, ...] = BOUND_PIXELS) -> tuple[float, ...]:
    """One frame's lane-marking F-score at each pixel bound."""
    predicted = rasterise_lanes(predictions, image_size)
    labelled = rasterise_lanes(truth, image_size)
    return tuple(boundary_fscore(labelled, predicted, bound) for bound in bounds)


def mean_lane_fscores(per_frame: list[tuple[float, ...]], bounds: tuple[int, ...] = BOUND_PIXELS) -> dict[str, float]:
    """{"F1_pix<b>": mean over frames} (fractions, not the toolkit's percent)."""
    scores = np.asarray(per_frame, np.float64).reshape(-1, len(bounds))
    return {f"F1_pix{b}": float(scores[:, i].mean()) if len(scores) else float("nan") for i, b in enumerate(bounds)}

