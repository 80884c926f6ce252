"""The real nuscenes-devkit loads the synthetic dataset: NuScenes, NuScenesMap, DetectionEval, PredictHelper."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from nuscenes.eval.detection.config import config_factory
from nuscenes.eval.detection.evaluate import DetectionEval
from nuscenes.eval.detection.utils import category_to_detection_name
from nuscenes.map_expansion.map_api import NuScenesMap
from nuscenes.nuscenes import NuScenes
from nuscenes.prediction import PredictHelper

from perception.data.splits import scenes_of_split
from perception.synthetic.nuscenes_writer import SyntheticSpec, build_worlds, write_synthetic_nuscenes

TABLES = ("category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
          "scene", "sample", "sample_data", "sample_annotation", "map")


@pytest.fixture(scope="module")
def nusc(small_dataset):
    return NuScenes(version="v1.0-trainval", dataroot=small_dataset, verbose=False)


def test_all_tables_load_and_link(nusc, small_dataset):
    for table in TABLES:
        assert len(getattr(nusc, table)) > 0, table
    assert len(nusc.scene) == 3 and len(nusc.sample) == 12
    sample = nusc.sample[0]
    assert set(sample["data"]) == {"CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT",
                                   "CAM_FRONT_LEFT", "LIDAR_TOP"}
    for channel, token in sample["data"].items():
        sd = nusc.get("sample_data", token)
        assert sd["is_key_frame"]
        if channel.startswith("CAM"):
            assert os.path.isfile(os.path.join(small_dataset, sd["filename"]))
    # Annotation chains are linked and velocities can be computed by the devkit.
    moving = [a for a in nusc.sample_annotation if a["prev"] and a["next"] and a["category_name"] == "vehicle.car"]
    speeds = [np.linalg.norm(nusc.box_velocity(a["token"])[:2]) for a in moving]
    assert np.nanmax(speeds) > 2.0


def test_map_expansion_loads_with_every_layer(small_dataset, small_spec):
    nusc_map = NuScenesMap(dataroot=small_dataset, map_name="boston-seaport")
    for layer in ("drivable_area", "road_segment", "road_block", "lane", "ped_crossing", "walkway", "stop_line",
                  "carpark_area", "road_divider", "lane_divider", "traffic_light"):
        assert len(getattr(nusc_map, layer)) > 0, layer
    # Lanes discretised by the devkit follow our lane centre lines.
    world = build_worlds(small_spec)["boston-seaport"]
    lane_token = nusc_map.lane[0]["token"]
    poses = np.asarray(nusc_map.discretize_lanes([lane_token], 0.5)[lane_token])
    reference = world.lanes[0].path.sample(0.25)
    distances = np.min(np.linalg.norm(poses[:, None, :2] - reference[None], axis=-1), axis=1)
    assert distances.max() < 0.2
    # Every traffic light sits beside a stop line and faces traffic.
    assert len(nusc_map.traffic_light) == len(nusc_map.stop_line) == len(world.traffic_lights)


def test_detection_eval_scores_ground_truth_perfectly(nusc, small_dataset, tmp_path):
    val_scenes = set(scenes_of_split(small_dataset, "v1.0-trainval", "synthetic_val"))
    results = {}
    for sample in nusc.sample:
        if nusc.get("scene", sample["scene_token"])["name"] not in val_scenes:
            continue
        boxes = []
        for token in sample["anns"]:
            ann = nusc.get("sample_annotation", token)
            name = category_to_detection_name(ann["category_name"])
            # Objects hidden from every camera have no lidar points and are not ground truth for the
            # devkit (as on real data); submitting them would be false positives.
            if name is None or ann["num_lidar_pts"] + ann["num_radar_pts"] == 0:
                continue
            velocity = nusc.box_velocity(token)[:2]
            attribute = nusc.get("attribute", ann["attribute_tokens"][0])["name"] if ann["attribute_tokens"] else ""
            boxes.append(dict(sample_token=sample["token"], translation=ann["translation"], size=ann["size"],
                              rotation=ann["rotation"], velocity=np.nan_to_num(velocity).tolist(),
                              detection_name=name, detection_score=0.9, attribute_name=attribute))
        results[sample["token"]] = boxes
    path = tmp_path / "results.json"
    meta = dict(use_camera=True, use_lidar=False, use_radar=False, use_map=False, use_external=False)
    path.write_text(json.dumps(dict(meta=meta, results=results)))
    evaluation = DetectionEval(nusc, config_factory("detection_cvpr_2019"), str(path), "synthetic_val",
                               str(tmp_path / "eval"), verbose=False)
    metrics, _ = evaluation.evaluate()
    aps = metrics.serialize()["mean_dist_aps"]
    scored = {box.detection_name for box in evaluation.gt_boxes.all}  # classes left after the devkit's filters
    assert {"car", "pedestrian"} <= scored
    errors = metrics.serialize()["label_tp_errors"]
    for name in scored:
        assert aps[name] == pytest.approx(1.0, abs=1e-6), name
        assert errors[name]["trans_err"] < 1e-6 and errors[name]["scale_err"] < 1e-6, name


def test_predict_helper_returns_curving_futures(nusc):
    helper = PredictHelper(nusc)
    deviations = []
    for ann in nusc.sample_annotation:
        if ann["category_name"] != "vehicle.car" or ann["prev"]:
            continue
        future = helper.get_future_for_agent(ann["instance_token"], ann["sample_token"], 2, in_agent_frame=True)
        if len(future) >= 3 and np.linalg.norm(future[-1]) > 3:
            deviations.append(abs(future[-1][0]) / np.linalg.norm(future[-1]))  # lateral share in agent frame
    assert len(deviations) >= 5
    assert max(deviations) > 0.02  # some agents are on curves: not all futures are straight ahead


def test_generator_is_deterministic(tmp_path):
    spec = SyntheticSpec(scenes=2, samples_per_scene=2, cameras=1, image_size=(160, 90), val_scenes=1, seed=7,
                         workers=1)

    def digest(root):
        h = hashlib.md5()
        for table in ("sample_annotation", "ego_pose", "sample_data"):
            h.update((root / "v1.0-trainval" / f"{table}.json").read_bytes())
        for image in sorted((root / "samples" / "CAM_FRONT").iterdir()):
            h.update(image.read_bytes())
        return h.hexdigest()

    write_synthetic_nuscenes(str(tmp_path / "a"), spec)
    write_synthetic_nuscenes(str(tmp_path / "b"), spec)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
