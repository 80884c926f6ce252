"""Lane F1 and traffic-light AP50 agree with hand-computed values and with pycocotools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perception.metrics.box_ap import coco_ap50
from perception.metrics.lanes import LaneF1, lane_iou_matrix, match_lanes

SIZE = (1640, 590)  # the reference resolution: 30 px lines, no scaling
VERTICAL = np.array([[800.0, 590.0], [800.0, 200.0]])


def test_identical_lanes_match_perfectly():
    metric = LaneF1()
    metric.update([VERTICAL], [VERTICAL], SIZE)
    assert metric.compute() == {"F1": 1.0, "precision": 1.0, "recall": 1.0}


def test_lane_iou_of_parallel_shifted_lines_is_their_band_overlap():
    # Two 30 px wide vertical bands shifted by d overlap over 30 - d px: IoU = (30 - d) / (30 + d).
    for shift, expected in ((6, 24 / 36), (20, 10 / 50)):
        iou = lane_iou_matrix([VERTICAL + [shift, 0]], [VERTICAL], SIZE)[0, 0]
        assert iou == pytest.approx(expected, abs=0.02)
    assert match_lanes([VERTICAL + [6, 0]], [VERTICAL], SIZE) == (1, 0, 0)  # IoU 0.67 >= 0.5
    assert match_lanes([VERTICAL + [20, 0]], [VERTICAL], SIZE) == (0, 1, 1)  # IoU 0.2 < 0.5


def test_one_to_one_matching_and_f1():
    second = VERTICAL + [300, 0]
    metric = LaneF1()
    metric.update([VERTICAL + [2, 0]], [VERTICAL, second], SIZE)  # one found, one missed
    metric.update([VERTICAL, VERTICAL + [3, 0]], [VERTICAL], SIZE)  # a duplicate is a false positive
    assert (metric.tp, metric.fp, metric.fn) == (2, 1, 1)
    assert metric.compute()["F1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))


def test_line_width_scales_with_the_image():
    # At half the reference width a 15 px shift is 30 px at the reference: the bands just touch.
    half = (820, 295)
    lane = VERTICAL / 2
    assert lane_iou_matrix([lane + [15, 0]], [lane], half)[0, 0] < 0.05
    assert lane_iou_matrix([lane + [3, 0]], [lane], half)[0, 0] == pytest.approx(24 / 36, abs=0.03)


def test_no_lanes_at_all_is_undefined_not_perfect():
    metric = LaneF1()
    metric.update([], [], SIZE)
    assert math.isnan(metric.compute()["F1"])
    metric.update([VERTICAL], [], SIZE)
    assert metric.compute()["F1"] == 0.0


STATES = ("red", "yellow", "green", "off")


def _image(boxes, labels, scores=None):
    out = {"boxes_xyxy": np.asarray(boxes, np.float64).reshape(-1, 4), "labels": np.asarray(labels, np.int64)}
    if scores is not None:
        out["scores"] = np.asarray(scores, np.float64)
    return out


def test_ground_truth_as_prediction_scores_one():
    truth = [_image([[10, 10, 20, 40], [100, 50, 112, 80]], [0, 2]), _image([[30, 5, 40, 30]], [1])]
    found = [dict(t, scores=np.linspace(0.9, 0.5, len(t["labels"]))) for t in truth]
    metrics = coco_ap50(truth, found, STATES)
    assert metrics["AP50"] == pytest.approx(1.0)
    for state in ("red", "yellow", "green"):
        assert metrics[f"AP50_{state}"] == pytest.approx(1.0)
    assert math.isnan(metrics["AP50_off"])  # no ground truth: left out of the mean


def test_hand_computed_average_precision():
    truth = [_image([[0, 0, 10, 10], [50, 50, 60, 60]], [0, 0])]
    # A hit (0.9), a false positive (0.8) and the second red light missed: precision 1 up to
    # recall 0.5, so 51 of COCO's 101 recall points score 1.
    found = [_image([[0, 0, 10, 10], [200, 200, 210, 210]], [0, 0], [0.9, 0.8])]
    assert coco_ap50(truth, found, STATES)["AP50_red"] == pytest.approx(51 / 101)
    # The false positive ranked first: precision 1/2 at recall 0.5.
    found = [_image([[0, 0, 10, 10], [200, 200, 210, 210]], [0, 0], [0.7, 0.8])]
    assert coco_ap50(truth, found, STATES)["AP50_red"] == pytest.approx(0.5 * 51 / 101)
    # IoU 0.45 < 0.5 is a miss; the right box with the wrong state is a miss too.
    shifted = _image([[0, 0, 10, 10 * 0.45]], [0], [0.9])
    assert coco_ap50(truth, [shifted], STATES)["AP50_red"] == 0.0
    wrong_state = _image([[0, 0, 10, 10]], [2], [0.9])
    metrics = coco_ap50(truth, [wrong_state], STATES)
    assert metrics["AP50_red"] == 0.0 and math.isnan(metrics["AP50_green"])


def test_perturbed_detections_match_a_direct_pycocotools_run():
    """Our wrapper (xyxy, 0-based labels, per-image lists) against pycocotools driven by hand."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    rng = np.random.default_rng(0)
    truth, found = [], []
    for _ in range(12):
        n = int(rng.integers(0, 6))
        xy = rng.uniform(0, 600, (n, 2))
        wh = rng.uniform(8, 40, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1)
        labels = rng.integers(0, 3, n)
        truth.append(_image(boxes, labels))
        keep = rng.random(n) < 0.8
        noisy = boxes[keep] + rng.normal(0, 2, (int(keep.sum()), 4))
        extra = rng.uniform(0, 600, (2, 2))
        noisy = np.concatenate([noisy, np.concatenate([extra, extra + 20], 1)])
        found_labels = np.concatenate([labels[keep], rng.integers(0, 3, 2)])
        found.append(_image(noisy, found_labels, rng.random(len(found_labels))))
    ours = coco_ap50(truth, found, STATES)

    gt = COCO()
    gt.dataset = {"images": [{"id": i} for i in range(len(truth))], "categories": [{"id": k} for k in range(3)],
                  "annotations": [{"id": j, "image_id": i, "category_id": int(c), "iscrowd": 0,
                                   "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                                   "area": (b[2] - b[0]) * (b[3] - b[1])}
                                  for i, t in enumerate(truth) for j, (b, c) in
                                  enumerate(zip(t["boxes_xyxy"], t["labels"]), start=1000 * i + 1)]}
    gt.createIndex()
    dt = gt.loadRes([{"image_id": i, "category_id": int(c), "score": float(s),
                      "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]}
                     for i, f in enumerate(found) for b, c, s in zip(f["boxes_xyxy"], f["labels"], f["scores"])])
    evaluator = COCOeval(gt, dt, "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    assert ours["AP50"] == pytest.approx(evaluator.stats[1], abs=1e-9)  # stats[1]: AP at IoU 0.5
    assert 0.3 < ours["AP50"] < 0.95  # the perturbation bites, the case is not trivial
