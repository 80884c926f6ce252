"""Decoding obstacle outputs: exact encodings decode to the encoded boxes; camera merge."""

from __future__ import annotations

import math

import numpy as np
import torch

from perception.core.obstacle_coding import encode_depth
from perception.postprocess.obstacles import decode_image, merge_cameras, to_global


def test_decode_inverts_the_target_encoding():
    intrinsics = np.array([[350.0, 0.0, 224.0], [0.0, 350.0, 100.0], [0.0, 0.0, 1.0]])
    centre = np.array([2.0, 1.2, 14.0])
    uv = intrinsics @ centre
    uv = uv[:2] / uv[2]
    q, c = 5, 10
    outputs = {
        "obstacles.logits": torch.full((1, q, c), -8.0),
        "obstacles.center": torch.zeros(1, q, 2), "obstacles.depth": torch.zeros(1, q),
        "obstacles.size": torch.zeros(1, q, 3), "obstacles.yaw": torch.zeros(1, q, 2),
        "obstacles.velocity": torch.zeros(1, q, 2), "obstacles.attribute": torch.zeros(1, q, 8),
    }
    outputs["obstacles.logits"][0, 3, 5] = 4.0  # a pedestrian in query 3
    outputs["obstacles.center"][0, 3] = torch.tensor([uv[0] / 448, uv[1] / 224])
    outputs["obstacles.depth"][0, 3] = encode_depth(torch.tensor(14.0), torch.tensor(350.0))
    outputs["obstacles.size"][0, 3] = torch.tensor([0.6, 0.7, 1.8]).log()
    outputs["obstacles.yaw"][0, 3] = torch.tensor([math.sin(0.4), math.cos(0.4)])
    outputs["obstacles.attribute"][0, 3, 7] = 3.0  # pedestrian.moving
    outputs["obstacles.attribute"][0, 3, 0] = 9.0  # vehicle.moving: not allowed for pedestrians
    boxes = decode_image(outputs, 0, intrinsics, (224, 448), max_detections=10, score_threshold=0.5)
    assert boxes.labels.tolist() == [5]
    assert np.allclose(boxes.center_cam[0], centre, atol=1e-4)
    assert np.allclose(boxes.size_wlh[0], [0.6, 0.7, 1.8], atol=1e-5)
    assert math.isclose(boxes.yaw_cam[0], 0.4, abs_tol=1e-5)
    assert boxes.attributes == ["pedestrian.moving"]

    # Camera facing +x of the ego, ego at (100, 50) facing +y: yaw_cam 0 (heading along the
    # optical axis) is ego +x, i.e. global +y.
    ego_from_camera = np.eye(4)
    ego_from_camera[:3, :3] = [[0, 0, 1], [-1, 0, 0], [0, -1, 0]]
    global_from_ego = np.eye(4)
    global_from_ego[:3, :3] = [[0, -1, 0], [1, 0, 0], [0, 0, 1]]
    global_from_ego[:3, 3] = [100.0, 50.0, 0.0]
    boxes.yaw_cam[:] = 0.0
    (record,) = to_global(boxes, ego_from_camera, global_from_ego)
    assert np.allclose(record["translation"], [100.0 + 2.0, 50.0 + 14.0, -1.2], atol=1e-4)
    assert np.allclose(record["rotation"], [math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)], atol=1e-6)


def bev_box(x: float, y: float, name: str, score: float) -> dict:
    """The fields of a detection record the BEV merge reads (global x, y in metres)."""
    return {"translation": [x, y, 0.0], "detection_name": name, "detection_score": score}


def names_and_scores(records: list[dict]) -> list[tuple[str, float]]:
    return [(r["detection_name"], r["detection_score"]) for r in records]


def test_merge_removes_cross_camera_duplicates_only():
    merged = merge_cameras([bev_box(0, 0, "car", 0.5), bev_box(0.6, 0.3, "car", 0.9),
                            bev_box(0.6, 0.3, "pedestrian", 0.4), bev_box(5, 0, "car", 0.3)])
    assert names_and_scores(merged) == [("car", 0.9), ("pedestrian", 0.4), ("car", 0.3)]


def test_merge_radius_scale_widens_the_same_class_merge_only():
    # Cars 2.5 m apart (radius 1.5 m), pedestrians 0.8 m apart (0.5 m), a truck beside the first car.
    boxes = [bev_box(0, 0, "car", 0.9), bev_box(2.5, 0, "car", 0.6), bev_box(10, 0, "pedestrian", 0.8),
             bev_box(10.8, 0, "pedestrian", 0.7), bev_box(0.5, 0, "truck", 0.5)]
    assert len(merge_cameras(boxes)) == 5  # each pair beyond its class radius
    assert names_and_scores(merge_cameras(boxes, radius_scale=2.0)) == [
        ("car", 0.9), ("pedestrian", 0.8), ("truck", 0.5)]
    # At 5 m (radius 1.5 x 3 = 4.5 m) the second car stays.
    far = [bev_box(0, 0, "car", 0.9), bev_box(5.0, 0, "car", 0.6)]
    assert len(merge_cameras(far, radius_scale=3.0)) == 2


def test_optional_2d_nms_drops_same_class_duplicates_only():
    intrinsics = np.array([[350.0, 0.0, 224.0], [0.0, 350.0, 100.0], [0.0, 0.0, 1.0]])
    q, c = 4, 10
    outputs = {
        "obstacles.logits": torch.full((1, q, c), -8.0), "obstacles.boxes": torch.zeros(1, q, 4),
        "obstacles.center": torch.full((1, q, 2), 0.5), "obstacles.depth": torch.zeros(1, q),
        "obstacles.size": torch.zeros(1, q, 3), "obstacles.yaw": torch.zeros(1, q, 2),
        "obstacles.velocity": torch.zeros(1, q, 2), "obstacles.attribute": torch.zeros(1, q, 8),
    }
    # Queries 0 and 1: one car twice (IoU 0.83); query 2: a pedestrian on the same spot; query 3: a car elsewhere.
    outputs["obstacles.boxes"][0] = torch.tensor([[0.5, 0.5, 0.2, 0.2], [0.52, 0.5, 0.22, 0.2],
                                                  [0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]])
    for query, label, logit in ((0, 0, 3.0), (1, 0, 2.0), (2, 5, 1.0), (3, 0, 0.5)):
        outputs["obstacles.logits"][0, query, label] = logit
    free = decode_image(outputs, 0, intrinsics, (224, 448), max_detections=10, score_threshold=0.3)
    assert free.labels.tolist() == [0, 0, 5, 0]  # NMS-free: the duplicate stays
    suppressed = decode_image(outputs, 0, intrinsics, (224, 448), max_detections=10, score_threshold=0.3, nms_iou=0.5)
    assert suppressed.labels.tolist() == [0, 5, 0]
    assert np.allclose(suppressed.scores, torch.sigmoid(torch.tensor([3.0, 1.0, 0.5])).numpy())
