#!/usr/bin/env python
"""What held-out mAP / NDS would be if the obstacle head's depth, or its class, were right: the devkit's scores of
a submission as predicted and with oracles put in, which says which error holds mAP down.

    python bench/obstacle_oracles.py work_dirs/demo/heldout/step_900/results_nusc_synthetic_val.json
    python bench/obstacle_oracles.py RESULTS.json --data-root data/synthetic_nuscenes --split synthetic_val

- depth oracle: each detection is moved along its own bearing from the ego (the direction is kept) to the range of
  the annotation on that bearing (within ``--bearing-deg``) whose range is nearest its own, if that range is within
  ``--max-range-ratio`` of it; other detections stay. What mAP would be with the head's depth right.
- class oracle: each detection within 2 m of an annotation (bird's-eye) takes that annotation's class and
  attribute. What mAP would be with the head's classes right.
- both.

Annotations are the devkit's filtered ground truth (the boxes it scores: within the class range, seen by a sensor).
The submission is what ``tools/test.py`` or the held-out scoring wrote (``results_nusc_<split>.json``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

CLASS_ORACLE_RADIUS_M = 2.0


def ego_positions(nusc, sample_tokens) -> dict[str, np.ndarray]:
    """(x, y) global of the ego at each sample (the LIDAR_TOP pose, the devkit's reference for ego distances)."""
    out = {}
    for token in sample_tokens:
        record = nusc.get("sample_data", nusc.get("sample", token)["data"]["LIDAR_TOP"])
        out[token] = np.asarray(nusc.get("ego_pose", record["ego_pose_token"])["translation"][:2], dtype=float)
    return out


def with_oracles(submission: dict, gt_boxes, ego: dict[str, np.ndarray], depth: bool, classes: bool,
                 bearing_deg: float = 3.0, max_range_ratio: float = 0.3) -> dict:
    """A copy of ``submission`` with the depth and / or class oracle applied (see the module doc). ``gt_boxes``: the
    devkit's EvalBoxes of the annotations, by sample token."""
    out = copy.deepcopy(submission)
    for token, detections in out["results"].items():
        annotations = gt_boxes[token] if token in gt_boxes.sample_tokens else []
        if not annotations:
            continue
        origin = ego[token]
        rel = np.array([a.translation[:2] for a in annotations]) - origin  # (M, 2) from the ego
        ranges, bearings = np.linalg.norm(rel, axis=1), np.arctan2(rel[:, 1], rel[:, 0])
        for det in detections:
            v = np.asarray(det["translation"][:2], dtype=float) - origin
            if depth:
                off = np.abs((bearings - np.arctan2(v[1], v[0]) + np.pi) % (2 * np.pi) - np.pi)
                ratio = ranges / max(float(np.linalg.norm(v)), 1e-3)
                ok = (off < np.radians(bearing_deg)) & (np.abs(ratio - 1) < max_range_ratio)
                if ok.any():
                    v = v * ratio[np.argmin(np.where(ok, np.abs(ratio - 1), np.inf))]
                    det["translation"] = [*(origin + v).tolist(), det["translation"][2]]
            if classes:
                distance = np.linalg.norm(rel - v, axis=1)
                nearest = int(np.argmin(distance))
                if distance[nearest] < CLASS_ORACLE_RADIUS_M:
                    det["detection_name"] = annotations[nearest].detection_name
                    det["attribute_name"] = annotations[nearest].attribute_name
    return out


def score(nusc, eval_config, submission: dict, split: str, work: str) -> dict:
    """The devkit's metrics of a submission (its summary dict) and the mean AP at each distance threshold."""
    from nuscenes.eval.detection.evaluate import DetectionEval

    path = os.path.join(work, "submission.json")
    with open(path, "w") as f:
        json.dump(submission, f)
    metrics, _ = DetectionEval(nusc, eval_config, path, split, work, verbose=False).evaluate()
    summary = metrics.serialize()
    summary["ap_by_distance"] = {str(t): float(np.mean([metrics.get_label_ap(c, t) for c in eval_config.class_names]))
                                 for t in eval_config.dist_ths}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="a nuScenes detection submission (results_nusc_<split>.json)")
    parser.add_argument("--data-root", default="data/synthetic_nuscenes")
    parser.add_argument("--version", default="v1.0-trainval")
    parser.add_argument("--split", default="synthetic_val")
    parser.add_argument("--bearing-deg", type=float, default=3.0)
    parser.add_argument("--max-range-ratio", type=float, default=0.3)
    args = parser.parse_args()

    from nuscenes import NuScenes
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.evaluate import DetectionEval

    with open(args.results) as f:
        submission = json.load(f)
    nusc = NuScenes(args.version, args.data_root, verbose=False)
    eval_config = config_factory("detection_cvpr_2019")
    with tempfile.TemporaryDirectory() as work:
        gt_boxes = DetectionEval(nusc, eval_config, args.results, args.split, work, verbose=False).gt_boxes
        ego = ego_positions(nusc, gt_boxes.sample_tokens)
        print(f"{args.results}: {len(gt_boxes.all)} annotations scored over {len(gt_boxes.sample_tokens)} samples")
        for name, depth, classes in (("as predicted", False, False), ("depth oracle", True, False),
                                     ("class oracle", False, True), ("depth + class oracle", True, True)):
            variant = with_oracles(submission, gt_boxes, ego, depth, classes, args.bearing_deg, args.max_range_ratio)
            s = score(nusc, eval_config, variant, args.split, work)
            by_distance = " / ".join(f"{v:.3f}" for v in s["ap_by_distance"].values())
            print(f"  {name:<21} mAP {s['mean_ap']:.3f}  NDS {s['nd_score']:.3f}  "
                  f"mATE {s['tp_errors']['trans_err']:.2f} m  AP at {' / '.join(s['ap_by_distance'])} m: {by_distance}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
