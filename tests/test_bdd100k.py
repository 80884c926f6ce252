"""BDD100K-format reading and the synthetic BDD100K generator."""

from __future__ import annotations

import json
import os

import cv2
import numpy as np
import pytest

from perception.core.lane_coding import LANE_CLASSES
from perception.core.light_states import LIGHT_STATES
from perception.data.bdd100k import (
    Bdd100kDataset,
    Bdd100kFormatError,
    load_bdd100k_infos,
    poly2d_to_polyline,
)
from perception.data.transforms import CameraTransform
from perception.synthetic.render import LAMP_RGB
from perception.tasks import CAMERA_TASKS


def test_reader_maps_colours_and_lane_categories(bdd_dataset):
    infos = load_bdd100k_infos(bdd_dataset, "train")
    assert len(infos) == 18  # 3 drives x 6 frames
    with open(os.path.join(bdd_dataset, "labels", "det_20", "det_train.json")) as f:
        frames = {frame["name"]: frame for frame in json.load(f)}
    codes = {"R": "red", "Y": "yellow", "G": "green", "NA": "off"}
    lights_seen = 0
    for info in infos:
        expected = [codes[label["attributes"]["trafficLightColor"]] for label in frames[info["name"]]["labels"]
                    if label["category"] == "traffic light"]
        assert [LIGHT_STATES[k] for k in info["lights"]["labels"]] == expected
        lights_seen += len(expected)
        assert info["drivable_mask"] is not None and os.path.isfile(info["drivable_mask"])
    assert lights_seen >= 10
    with open(os.path.join(bdd_dataset, "labels", "lane", "polygons", "lane_train.json")) as f:
        lanes = {frame["name"]: frame for frame in json.load(f)}
    for info in infos:
        kept = [label for label in lanes[info["name"]]["labels"] if label["category"] != "road curb"]
        assert [LANE_CLASSES[k] for k in info["lanes"]["labels"]] == [
            "road_divider" if label["category"] == "single yellow" else "lane_divider" for label in kept]


def test_poly2d_bezier_segments_are_evaluated():
    # "LCCL": a cubic from (0,0) to (3,0) with controls (1,3), (2,3); its midpoint is (1.5, 2.25).
    points = poly2d_to_polyline([[0, 0], [1, 3], [2, 3], [3, 0]], "LCCL")
    assert np.allclose(points[0], [0, 0]) and np.allclose(points[-1], [3, 0])
    assert np.allclose(points[len(points) // 2], [1.5, 2.25])
    assert len(poly2d_to_polyline([[0, 0], [1, 1], [2, 0]], "LLL")) == 3


def test_bad_labels_name_the_file_and_value(tmp_path):
    labels = tmp_path / "labels" / "det_20"
    labels.mkdir(parents=True)
    (labels / "det_train.json").write_text(json.dumps([{"name": "a.jpg", "labels": [
        {"category": "traffic light", "attributes": {"trafficLightColor": "purple"},
         "box2d": {"x1": 0, "y1": 0, "x2": 5, "y2": 9}}]}]))
    with pytest.raises(Bdd100kFormatError, match="det_train.json.*purple"):
        load_bdd100k_infos(str(tmp_path), "train")
    with pytest.raises(FileNotFoundError, match="bdd100k.data_root"):
        load_bdd100k_infos(str(tmp_path), "val")


def test_synthetic_lights_show_their_labelled_colour(bdd_dataset):
    """The generator renders from its labels: a lit light's box holds its lamp colour, and no other."""
    checked = 0
    for info in load_bdd100k_infos(bdd_dataset, "train"):
        image = cv2.imread(os.path.join(bdd_dataset, info["image_path"]))[..., ::-1].astype(np.int32)
        for box, label in zip(info["lights"]["boxes_xyxy"], info["lights"]["labels"]):
            x0, y0, x1, y1 = (int(round(v)) for v in box)
            state = LIGHT_STATES[label]
            if state == "off" or y1 - y0 < 12 or x0 <= 0 or x1 >= image.shape[1]:
                continue
            crop = image[y0:y1, x0:x1].reshape(-1, 3)
            distance = {s: np.abs(crop - np.array(rgb)).sum(1).min() for s, rgb in LAMP_RGB.items()}
            assert min(distance, key=distance.get) == state, (info["name"], state, distance)
            checked += 1
    assert checked >= 3


def test_items_share_the_nuscenes_structure_and_follow_the_transform(bdd_dataset):
    transform = CameraTransform((224, 448), train=False)
    dataset = Bdd100kDataset(bdd_dataset, "val", transform, tasks=CAMERA_TASKS)
    item = dataset[0]
    info = dataset.infos[0]
    assert item["image"].shape == (3, 224, 448)
    targets = item["targets"]
    assert targets["obstacles"]["valid"] is False and targets["lights"]["valid"] and targets["lanes"]["valid"]
    assert set(np.unique(targets["drivable"]["mask"].numpy())) <= {0, 1}
    affine = item["meta"]["affine"]
    for lane, original in zip(targets["lanes"]["polylines"], info["lanes"]["polylines"]):
        expected = np.asarray(original) @ affine[:2, :2].T + affine[:2, 2]
        assert np.allclose(lane.numpy(), expected, atol=1e-3)
    assert item["meta"]["image_key"] == f"bdd100k/val/{info['name']}"
