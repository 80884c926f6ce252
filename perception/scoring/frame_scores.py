"""Per-frame figures for the evaluation report: what ranks frames best/worst, the light-state
confusion matrix and the lane precision/recall sweep.

The split's metrics stay the reference ones (devkit, pycocotools, CULane-style F1); these are the
diagnostics around them, at one operating point (``REPORT_MIN_SCORE``) unless a sweep is stated.
"""

from __future__ import annotations

import numpy as np

from perception.data.camera_dataset import drop_hidden_obstacles
from perception.metrics.lanes import lane_iou_matrix, matched_truths
from perception.postprocess.obstacles import CameraBoxes

REPORT_MIN_SCORE = 0.3  # the drawings' operating point (tools/demo.py's default --min-score)
OBSTACLE_MATCH_METRES = 2.0  # the devkit's middle centre-distance threshold


def f1(tp: int, fp: int, fn: int) -> float | None:
    """F1, or None when the frame has neither predictions nor labels (nothing to rank it by)."""
    return None if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU [N, M] of xyxy boxes."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    low, high = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    intersection = np.clip(high - low, 0, None).prod(-1)
    area = lambda boxes: np.clip(boxes[:, 2:] - boxes[:, :2], 0, None).prod(-1)
    return intersection / np.maximum(area(a)[:, None] + area(b)[None] - intersection, 1e-9)


def greedy_match(similarity: np.ndarray, scores: np.ndarray, threshold: float, larger_is_better: bool = True
                 ) -> list[tuple[int, int]]:
    """(prediction, truth) pairs: predictions in score order take their best free truth (COCO-style)."""
    pairs, taken = [], set()
    for p in np.argsort(-np.asarray(scores)):
        best, best_value = None, None
        for t in range(similarity.shape[1]):
            value = similarity[p, t]
            ok = value >= threshold if larger_is_better else value <= threshold
            if t in taken or not ok:
                continue
            if best is None or (value > best_value if larger_is_better else value < best_value):
                best, best_value = t, value
        if best is not None:
            taken.add(best)
            pairs.append((int(p), best))
    return pairs


def visible_truth_boxes(info: dict, min_visibility: float) -> CameraBoxes:
    """The ground-truth obstacles of a label-cache camera record that the camera sees at least ``min_visibility``
    of (the training targets' rule), as CameraBoxes (camera frame; score 1, no velocity or attribute)."""
    truth = drop_hidden_obstacles(info, min_visibility)["obstacles"]
    count = len(truth["label"])
    return CameraBoxes(np.asarray(truth["center_cam"], np.float64).reshape(-1, 3),
                       np.asarray(truth["size_wlh"], np.float64).reshape(-1, 3),
                       np.asarray(truth["yaw_cam"], np.float64).reshape(-1), np.zeros((count, 2)),
                       np.asarray(truth["label"], np.int64).reshape(-1), np.ones(count), [""] * count)


def obstacle_frame_counts(predicted: CameraBoxes, truth: CameraBoxes, min_score: float = REPORT_MIN_SCORE
                          ) -> tuple[int, int, int]:
    """(TP, FP, FN) of one camera image: same class, BEV centre within 2 m (camera x, z), score >= min_score."""
    keep = np.flatnonzero(predicted.scores >= min_score)
    centres, labels = predicted.center_cam[keep][:, [0, 2]], predicted.labels[keep]
    truth_centres = truth.center_cam[:, [0, 2]]
    distance = np.linalg.norm(centres[:, None] - truth_centres[None], axis=-1)
    distance[labels[:, None] != truth.labels[None]] = np.inf
    tp = len(greedy_match(distance, predicted.scores[keep], OBSTACLE_MATCH_METRES, larger_is_better=False))
    return tp, len(keep) - tp, len(truth_centres) - tp


def light_frame_counts(detections: dict, truth: dict, min_score: float = REPORT_MIN_SCORE) -> tuple[int, int, int]:
    """(TP, FP, FN) of one frame: same state, IoU >= 0.5, score >= min_score."""
    keep = np.asarray(detections["scores"]) >= min_score
    boxes, labels = np.asarray(detections["boxes_xyxy"])[keep], np.asarray(detections["labels"])[keep]
    truth_labels = np.asarray(truth["labels"]).reshape(-1)
    iou = box_iou(boxes, truth["boxes_xyxy"])
    iou[labels[:, None] != truth_labels[None]] = 0.0
    tp = len(greedy_match(iou, np.asarray(detections["scores"])[keep], 0.5))
    return tp, int(keep.sum()) - tp, len(truth_labels) - tp


def light_confusion(frames: list[tuple[dict, dict]], num_states: int, min_score: float = REPORT_MIN_SCORE
                    ) -> np.ndarray:
    """[K+1, K+1] counts: row = labelled state (last row: no light), column = predicted state (last: missed).

    Boxes are matched regardless of state (IoU >= 0.5, highest score first), so a wrong colour shows
    off the diagonal instead of as a miss plus a false positive."""
    matrix = np.zeros((num_states + 1, num_states + 1), np.int64)
    for detections, truth in frames:
        keep = np.asarray(detections["scores"]) >= min_score
        boxes, labels = np.asarray(detections["boxes_xyxy"])[keep], np.asarray(detections["labels"])[keep]
        truth_labels = np.asarray(truth["labels"]).reshape(-1)
        pairs = greedy_match(box_iou(boxes, truth["boxes_xyxy"]), np.asarray(detections["scores"])[keep], 0.5)
        for p, t in pairs:
            matrix[truth_labels[t], labels[p]] += 1
        for t in set(range(len(truth_labels))) - {t for _, t in pairs}:
            matrix[truth_labels[t], num_states] += 1
        for p in set(range(len(labels))) - {p for p, _ in pairs}:
            matrix[num_states, labels[p]] += 1
    return matrix


def lane_sweep_entry(predictions: list[np.ndarray], scores: np.ndarray, truth: list[np.ndarray],
                     image_size: tuple[int, int]) -> dict:
    """What the lane precision/recall sweep needs of one image: scores and the IoU matrix to its labels."""
    return {"scores": np.asarray(scores, np.float64), "iou": lane_iou_matrix(predictions, truth, image_size),
            "num_truth": len(truth)}


def lane_precision_recall(entries: list[dict], thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Precision and recall [T] of the CULane-style matching with predictions above each score threshold."""
    precision, recall = np.zeros(len(thresholds)), np.zeros(len(thresholds))
    for k, threshold in enumerate(thresholds):
        tp = fp = fn = 0
        for entry in entries:
            keep = entry["scores"] > threshold
            matched = int(matched_truths(entry["iou"][keep]).sum())
            tp, fp, fn = tp + matched, fp + int(keep.sum()) - matched, fn + entry["num_truth"] - matched
        precision[k] = tp / (tp + fp) if tp + fp else 1.0
        recall[k] = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall
