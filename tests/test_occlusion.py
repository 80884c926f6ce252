"""What a camera sees of 3D boxes: near-plane clipping and the visible fraction (ID-buffer rendering),
and that the synthetic writer's visibility and lidar counts follow it."""

from __future__ import annotations

import json
import os

import numpy as np

from perception.core.geometry import box_corners
from perception.data.occlusion import clipped_box_xyxy, visible_fractions

K = np.array([[400.0, 0.0, 320.0], [0.0, 400.0, 180.0], [0.0, 0.0, 1.0]])
UPRIGHT = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])  # box x (length) along camera z


def test_a_box_behind_a_larger_nearer_box_is_hidden_and_the_near_one_fully_visible():
    near = box_corners((0.0, 0.0, 10.0), (4.0, 2.0, 4.0), np.eye(3))
    far = box_corners((0.0, 0.0, 20.0), (2.0, 2.0, 2.0), np.eye(3))
    aside = box_corners((8.0, 0.0, 20.0), (2.0, 2.0, 2.0), np.eye(3))
    fractions = visible_fractions([far, near, aside], K, 640, 360)
    assert fractions[0] == 0.0
    assert fractions[1] == 1.0
    assert fractions[2] == 1.0


def test_partly_hidden_box_gets_a_fraction_between():
    near = box_corners((-1.0, 0.0, 10.0), (2.0, 2.0, 2.0), np.eye(3))
    far = box_corners((0.0, 0.0, 20.0), (2.0, 2.0, 2.0), np.eye(3))  # behind, offset so half of it shows
    fraction = visible_fractions([near, far], K, 640, 360)[1]
    assert 0.05 < fraction < 0.95


def test_box_out_of_view_has_zero_fraction():
    behind = box_corners((0.0, 0.0, -10.0), (2.0, 4.0, 2.0), np.eye(3))
    assert visible_fractions([behind], K, 640, 360)[0] == 0.0


def test_2d_box_of_an_object_crossing_the_camera_plane_reaches_the_image_border():
    # A 12 m long truck beside the camera, from 5 m behind to 7 m ahead, 2 m to the right.
    corners = box_corners((2.0, 0.5, 1.0), (2.5, 12.0, 3.0), UPRIGHT)
    assert corners[:, 2].min() < 0 < corners[:, 2].max()
    x0, y0, x1, y1 = clipped_box_xyxy(corners, K, 640, 360)
    assert x1 == 640 and y1 == 360 and y0 == 0  # the near part fills the right edge of the image
    # Projecting only the corners in front (the old way) stops far short of the border.
    front = corners[corners[:, 2] > 0.1]
    uv = front @ K.T
    assert (uv[:, 0] / uv[:, 2]).max() < 640


def test_synthetic_annotations_hidden_from_every_camera_have_no_lidar_points(small_dataset):
    with open(os.path.join(small_dataset, "v1.0-trainval", "sample_annotation.json")) as f:
        annotations = json.load(f)
    hidden = [a for a in annotations if a["num_lidar_pts"] == 0]
    assert hidden, "the generator should produce occluded objects"
    assert {a["visibility_token"] for a in hidden} == {"1"}
    assert any(a["visibility_token"] == "4" for a in annotations)


def test_label_cache_keeps_per_camera_visible_fraction_and_dataset_drops_hidden_targets(small_dataset):
    from perception.core.nuscenes_constants import CAMERAS
    from perception.data.camera_dataset import drop_hidden_obstacles
    from perception.data.datamodule import ensure_label_cache
    from perception.data.label_cache import default_cache_root

    infos, _ = ensure_label_cache(small_dataset, "v1.0-trainval", "synthetic_train", list(CAMERAS),
                                  default_cache_root(small_dataset), 60.0)
    fractions = [f for info in infos for f in info["obstacles"]["visible_fraction"]]
    assert fractions and min(fractions) == 0.0 and max(fractions) == 1.0
    info = max(infos, key=lambda i: sum(f < 0.2 for f in i["obstacles"]["visible_fraction"]))
    kept = drop_hidden_obstacles(info, 0.2)["obstacles"]
    assert len(kept["label"]) == sum(f >= 0.2 for f in info["obstacles"]["visible_fraction"]) < len(
        info["obstacles"]["label"])
    assert all(len(v) == len(kept["label"]) for v in kept.values())
