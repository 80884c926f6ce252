"""COCO-style AP at IoU 0.5 per class, computed by pycocotools (the reference implementation).

Boxes are xyxy in original-image pixels. Classes without ground truth in the split get AP NaN
and are left out of the mean, as COCO does; a class with ground truth and no detections gets 0.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np


def coco_ap50(ground_truth: list[dict], detections: list[dict], class_names: tuple[str, ...],
              max_detections: int = 100) -> dict[str, float]:
    """``ground_truth[i]``: boxes_xyxy [M,4], labels [M]; ``detections[i]``: boxes_xyxy [N,4], labels [N],
    scores [N] (image i of both lists is the same image). Returns {"AP50": mean, "AP50_<class>": ...}."""
    metrics = {"AP50": float("nan")} | {f"AP50_{name}": float("nan") for name in class_names}
    precision = coco_precision50(ground_truth, detections, class_names, max_detections)
    if precision is None:
        return metrics
    per_class = []
    for k, name in enumerate(class_names):
        column = precision[:, k]
        if (column > -1).any():
            metrics[f"AP50_{name}"] = float(column[column > -1].mean())
            per_class.append(metrics[f"AP50_{name}"])
    metrics["AP50"] = float(np.mean(per_class)) if per_class else float("nan")
    return metrics


def coco_precision50(ground_truth: list[dict], detections: list[dict], class_names: tuple[str, ...],
                     max_detections: int = 100) -> np.ndarray | None:
    """pycocotools' interpolated precision [R=101 recall points 0..1, K classes] at IoU 0.5 (-1 where a
    class has no ground truth); None when the split has no ground truth at all."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if len(ground_truth) != len(detections):
        raise ValueError(f"{len(ground_truth)} ground-truth images but {len(detections)} detection images")
    images, annotations, results = [], [], []
    for image_id, (truth, found) in enumerate(zip(ground_truth, detections), start=1):
        images.append({"id": image_id})
        for box, label in zip(np.asarray(truth["boxes_xyxy"], np.float64).reshape(-1, 4),
                              np.asarray(truth["labels"]).reshape(-1)):
            xywh = _xywh(box)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(label) + 1,
                                "bbox": xywh, "area": xywh[2] * xywh[3], "iscrowd": 0})
        for box, label, score in zip(np.asarray(found["boxes_xyxy"], np.float64).reshape(-1, 4),
                                     np.asarray(found["labels"]).reshape(-1), np.asarray(found["scores"]).reshape(-1)):
            results.append({"image_id": image_id, "category_id": int(label) + 1, "bbox": _xywh(box),
                            "score": float(score)})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(class_names)]
    if not annotations:
        return None
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        truth_api = COCO()
        truth_api.dataset = {"images": images, "annotations": annotations, "categories": categories}
        truth_api.createIndex()
        found_api = truth_api.loadRes(results) if results else COCO()
        if not results:
            found_api.dataset = {"images": images, "annotations": [], "categories": categories}
            found_api.createIndex()
        evaluator = COCOeval(truth_api, found_api, "bbox")
        evaluator.params.iouThrs = np.array([0.5])
        evaluator.params.maxDets = [max_detections]
        evaluator.params.areaRng = [[0.0, 1e10]]
        evaluator.params.areaRngLbl = ["all"]
        evaluator.evaluate()
        evaluator.accumulate()
    # precision [T=1, R=101, K, A=1, M=1]; -1 where a class has no ground truth
    return evaluator.eval["precision"][0, :, :, 0, 0]


def _xywh(box: np.ndarray) -> list[float]:
    x1, y1, x2, y2 = (float(v) for v in box)
    return [x1, y1, x2 - x1, y2 - y1]
