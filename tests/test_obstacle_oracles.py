"""bench/obstacle_oracles.py: each oracle repairs the error it stands for, and only that one.

The submission is the held-out annotations themselves with two planted errors: every detection 20 % too far along its
bearing from the ego (a depth error) and every other one labelled with the wrong class. The devkit then scores it
low; the depth oracle must recover the positions, the class oracle the classes, and both together nearly all
of the mAP.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
    path = os.path.join(ROOT, "bench", "obstacle_oracles.py")
    spec = importlib.util.spec_from_file_location("obstacle_oracles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def devkit(small_dataset):
    from nuscenes import NuScenes
    from nuscenes.eval.common.loaders import get_samples_of_custom_split, load_gt_of_sample_tokens
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.data_classes import DetectionBox
    from nuscenes.eval.detection.evaluate import add_center_dist, filter_eval_boxes

    nusc = NuScenes("v1.0-trainval", small_dataset, verbose=False)
    config = config_factory("detection_cvpr_2019")
    tokens = get_samples_of_custom_split(split_name="synthetic_val", nusc=nusc)  # the dataset's splits.json
    gt = load_gt_of_sample_tokens(nusc, tokens, DetectionBox)
    return nusc, config, filter_eval_boxes(nusc, add_center_dist(nusc, gt), config.class_range)


def _planted_submission(gt, ego) -> dict:
    swap = {"car": "truck", "truck": "car", "pedestrian": "bicycle", "bicycle": "pedestrian", "bus": "trailer",
            "trailer": "bus", "barrier": "traffic_cone", "traffic_cone": "barrier", "motorcycle": "bicycle",
            "construction_vehicle": "truck"}
    results = {}
    for token in gt.sample_tokens:
        detections = []
        for i, box in enumerate(gt[token]):
            centre = ego[token] + 1.2 * (np.asarray(box.translation[:2]) - ego[token])  # 20 % too far
            name = swap[box.detection_name] if i % 2 else box.detection_name
            detections.append({"sample_token": token, "translation": [*centre.tolist(), box.translation[2]],
                               "size": list(box.size), "rotation": list(box.rotation),
                               "velocity": list(box.velocity), "detection_name": name,
                               "detection_score": 0.9 - 0.001 * i, "attribute_name": box.attribute_name})
        results[token] = detections
    return {"meta": {"use_camera": True, "use_lidar": False, "use_radar": False, "use_map": False,
                     "use_external": False}, "results": results}


def test_each_oracle_repairs_its_own_error(devkit):
    nusc, config, gt = devkit
    bench = _bench()
    ego = bench.ego_positions(nusc, gt.sample_tokens)
    planted = _planted_submission(gt, ego)
    assert len(gt.all) >= 10
    with tempfile.TemporaryDirectory() as work:
        scores = {name: bench.score(nusc, config, bench.with_oracles(planted, gt, ego, depth, classes), "synthetic_val",
                                    work)
                  for name, depth, classes in (("as", False, False), ("depth", True, False), ("class", False, True),
                                               ("both", True, True))}
    close = scores["as"]["ap_by_distance"]
    # as planted: nothing within 0.5 m (20 % of the range is more than that beyond 2.5 m), half the classes wrong
    assert close["0.5"] == 0.0 and scores["as"]["mean_ap"] < 0.15
    # the depth oracle puts the detections back on their annotations: the positions are right, half the classes not
    assert scores["depth"]["tp_errors"]["trans_err"] < 0.05
    assert 0.25 < scores["depth"]["ap_by_distance"]["0.5"] < 0.75
    # the class oracle renames a detection only within 2 m of an annotation: near ones, which the 20 % leaves close
    assert scores["class"]["mean_ap"] > scores["as"]["mean_ap"]
    # both: all but the few detections whose bearing also meets another annotation at a closer range ratio
    assert scores["both"]["mean_ap"] > 0.9


def test_obstacle_oracles_bench_smoke(devkit, small_dataset, tmp_path):
    """The script end to end on a submission file (make test runs every bench at toy size)."""
    import json
    import subprocess
    import sys

    nusc, _, gt = devkit
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_planted_submission(gt, _bench().ego_positions(nusc, gt.sample_tokens))))
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_ALBUMENTATIONS_UPDATE="1")
    done = subprocess.run([sys.executable, "bench/obstacle_oracles.py", str(path), "--data-root", small_dataset],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("as predicted", "depth oracle", "class oracle", "depth + class oracle"):
        assert name in done.stdout
