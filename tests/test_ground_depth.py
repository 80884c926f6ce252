"""Depth from the ground plane (model.heads.obstacles.ground_keypoint + postprocess.obstacle_ground_depth): the head
places each box's bottom-centre row, the decoder meets the ground with it and fuses that depth with the regression."""

import numpy as np
import pytest
import torch
from conftest import experiment_dict
from head_export import GRAPH_PLUMBING, export_head, one_obstacle, train_head

from perception.build import build_datamodule, build_model
from perception.config import parse_config
from perception.core.errors import ConfigError
from perception.core.obstacle_coding import encode_depth
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.losses.obstacle_loss import ObstacleCriterion, bottom_rows
from perception.models.heads.obstacles import INITIAL_BOTTOM_OFFSET, ObstacleHead
from perception.postprocess.ground_depth import GroundDepth, fuse_ground_depth, ground_in_camera, ground_plane_depth
from perception.postprocess.obstacles import decode_image
from perception.synthetic.nuscenes_writer import camera_calibration


def _project(points_cam: np.ndarray, intrinsics: np.ndarray) -> np.ndarray:
    pixels = points_cam @ intrinsics.T
    return pixels[:, :2] / pixels[:, 2:]


@pytest.mark.parametrize("camera", ["CAM_FRONT", "CAM_BACK_LEFT"])
def test_ground_points_come_back_at_their_depth(camera):
    intrinsics, ego_from_camera = camera_calibration(camera, 640, 360)
    tilt = np.radians(2.0)  # a slightly pitched camera too: the plane, not a level-camera formula
    pitch = np.array([[1, 0, 0], [0, np.cos(tilt), -np.sin(tilt)], [0, np.sin(tilt), np.cos(tilt)]])
    ego_from_camera[:3, :3] = ego_from_camera[:3, :3] @ pitch
    ground = GroundDepth(*ground_in_camera(ego_from_camera), bottom_px_error=1.0, depth_relative_error=0.08)
    rng = np.random.default_rng(0)
    depth = rng.uniform(4.0, 60.0, 50)
    # Points on the ground (ego z = 0) in front of the camera: along the camera's rays, where they meet z = 0.
    camera_from_ego = np.linalg.inv(ego_from_camera)
    ego_points = []
    for z in depth:
        x_cam = rng.uniform(-0.5, 0.5) * z
        # The camera-frame point (x, y, z) on the ground: solve y from up . p = -height.
        y_cam = (-ground.height - ground.up[0] * x_cam - ground.up[2] * z) / ground.up[1]
        ego_points.append(ego_from_camera[:3, :3] @ [x_cam, y_cam, z] + ego_from_camera[:3, 3])
    ego_points = np.array(ego_points)
    assert np.allclose(ego_points[:, 2], 0.0, atol=1e-9)
    points_cam = ego_points @ camera_from_ego[:3, :3].T + camera_from_ego[:3, 3]
    uv = _project(points_cam, intrinsics)
    assert np.allclose(ground_plane_depth(uv[:, 0], uv[:, 1], intrinsics, ground), points_cam[:, 2], rtol=1e-9)
    above = ground_plane_depth(np.array([320.0]), np.array([100.0]), intrinsics, ground)  # above the horizon
    assert np.isnan(above).all()


def test_fusion_trusts_the_ground_near_and_the_regression_far():
    intrinsics = np.array([[350.0, 0, 224], [0, 350.0, 112], [0, 0, 1]])
    ground = GroundDepth(np.array([0.0, -1.0, 0.0]), 1.5, bottom_px_error=1.0, depth_relative_error=0.08)
    true = np.array([10.0, 80.0])
    bottom_v = 112 + 350 * 1.5 / true  # exact rows
    fused = fuse_ground_depth(true * 1.2, np.array([224.0, 224.0]), bottom_v, np.array([1.6, 1.6]), intrinsics, ground)
    # At 10 m the ground depth's relative error is 10 / 525 = 1.9 %, the regression's 8 %: 95 % of the weight.
    assert abs(fused[0] / true[0] - 1) < 0.015, fused
    # At 80 m it is 15 %: the regression gets 78 % of the weight.
    assert abs(fused[1] / true[1] - 1.2 ** 0.78) < 0.01, fused
    # A row at or above the horizon: the regression alone.
    alone = fuse_ground_depth(np.array([30.0]), np.array([224.0]), np.array([100.0]), np.array([1.6]), intrinsics,
                              ground)
    assert np.allclose(alone, 30.0)


def test_bottom_rows_are_the_projected_bottom_centres():
    intrinsics = torch.tensor([[50.0, 0, 32], [0, 50.0, 16], [0, 0, 1]])
    centre = torch.tensor([[1.0, 0.5, 12.0], [-2.0, 0.9, 20.0]])
    height = torch.tensor([1.6, 1.2])
    bottom = centre + torch.stack([torch.zeros(2), height / 2, torch.zeros(2)], 1)
    expected = _project(bottom.numpy(), intrinsics.numpy())[:, 1]
    assert np.allclose(bottom_rows(centre, height, intrinsics).numpy(), expected, atol=1e-5)


def test_head_places_the_bottom_row_trains_it_and_exports_it(tmp_path):
    torch.manual_seed(0)
    plain = ObstacleHead(16, dim=32, num_queries=5, num_layers=2, ffn_dim=64, levels=(1, 2))
    head = ObstacleHead(16, dim=32, num_queries=5, num_layers=2, ffn_dim=64, levels=(1, 2), ground_keypoint=True,
                        depth_uncertainty=True)
    levels = [torch.randn(1, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]
    assert "obstacles.bottom" not in plain(levels)
    outputs = head(levels)
    boxes = outputs["obstacles.boxes"]
    assert torch.allclose(outputs["obstacles.bottom"], boxes[..., 1] + INITIAL_BOTTOM_OFFSET * boxes[..., 3])
    assert outputs["obstacles.aux0.bottom"].shape == (1, 5)  # every decoder layer is supervised
    # The outputs laid out before it keep their starting values (the depth scale's sits after it).
    assert torch.allclose(outputs["obstacles.yaw"], torch.tensor([0.0, 1.0]).expand(1, 5, 2))

    targets = one_obstacle(yaw=0.0)
    target_row = float(bottom_rows(torch.tensor([[1.0, 0.5, 12.0]]), torch.tensor([1.6]),
                                   torch.tensor([[50.0, 0, 32], [0, 50.0, 16], [0, 0, 1]]))[0]) / 32
    history = train_head(head, ObstacleCriterion(dense_weight=0.0), levels, targets, 80, "obstacle_bottom")
    assert history[-1] < 0.3 * history[0], history
    head.eval()
    with torch.no_grad():
        expected = head(levels)
    best = int(expected["obstacles.logits"][0, :, 0].argmax())
    assert abs(float(expected["obstacles.bottom"][0, best]) - target_row) < 0.05

    names = ["obstacles.bottom", "obstacles.depth_log_scale", "obstacles.depth"]
    ops, exported = export_head(head, levels, names, str(tmp_path / "bottom.onnx"))
    assert ops <= TENSORRT_8_6_OPS | GRAPH_PLUMBING, ops - TENSORRT_8_6_OPS
    for name, value in zip(names, exported):
        assert np.abs(value - expected[name].numpy()).max() < 1e-4, name


def test_decoder_fuses_only_when_given_the_ground():
    intrinsics = np.array([[100.0, 0, 32], [0, 100.0, 16], [0, 0, 1]])
    logits = torch.full((1, 1, 10), -10.0)
    logits[0, 0, 0] = 2.0
    true_depth = 12.0
    outputs = {"obstacles.logits": logits, "obstacles.boxes": torch.tensor([[[0.5, 0.6, 0.2, 0.3]]]),
               "obstacles.center": torch.tensor([[[0.5, 0.6]]]),
               "obstacles.depth": encode_depth(torch.full((1, 1), 15.0), 100.0),  # 25 % too far
               "obstacles.size": torch.log(torch.tensor([[[1.9, 4.5, 1.6]]])),
               "obstacles.yaw": torch.tensor([[[0.0, 1.0]]]), "obstacles.velocity": torch.zeros(1, 1, 2),
               "obstacles.attribute": torch.zeros(1, 1, 8),
               "obstacles.bottom": torch.tensor([[(16 + 100 * 1.5 / true_depth) / 32]])}
    ground = GroundDepth(np.array([0.0, -1.0, 0.0]), 1.5, bottom_px_error=0.1, depth_relative_error=0.08)
    plain = decode_image(outputs, 0, intrinsics, (32, 64))
    fused = decode_image(outputs, 0, intrinsics, (32, 64), ground=ground)
    assert np.isclose(plain.center_cam[0, 2], 15.0, rtol=1e-5)
    assert abs(fused.center_cam[0, 2] - true_depth) < 0.05, fused.center_cam


def test_ground_truth_rows_give_back_the_annotated_depths(small_dataset):
    """On the written nuScenes-format data (calibrated_sensor extrinsics, annotations on the ground): the annotated
    boxes' bottom rows, met with the ground plane of their camera, give their depths."""
    cfg = parse_config(experiment_dict(small_dataset, model=dict(heads=dict(obstacles=dict(ground_keypoint=True))),
                                       postprocess=dict(obstacle_ground_depth=True)))
    dataset = build_datamodule(cfg).dataset("val")
    checked = 0
    for index in range(0, len(dataset), 3):
        item = dataset[index]
        target, meta = item["targets"]["obstacles"], item["meta"]
        if not target["valid"] or len(target["labels"]) == 0:
            continue
        intrinsics = np.asarray(meta["intrinsics"], np.float64)
        ground = GroundDepth(*ground_in_camera(np.asarray(meta["ego_from_camera"], np.float64)), 1.0, 0.08)
        rows = bottom_rows(target["center_cam"], target["size_wlh"][:, 2], target["intrinsics"]).numpy()
        depth = ground_plane_depth(target["center_uv"][:, 0].numpy().astype(np.float64), rows.astype(np.float64),
                                   intrinsics, ground)
        assert np.allclose(depth, target["center_cam"][:, 2].numpy(), rtol=1e-3), (meta["image_path"], depth)
        checked += len(depth)
    assert checked >= 20, checked


def test_config_switches():
    cfg = parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(ground_keypoint=True))),
                                       postprocess=dict(obstacle_ground_depth=True)))
    model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    with torch.no_grad():
        outputs = model(torch.zeros(1, 3, *cfg.input_size))
    assert outputs["obstacles.bottom"].shape == outputs["obstacles.depth"].shape
    with pytest.raises(ConfigError, match="ground_keypoint"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict())),
                                     postprocess=dict(obstacle_ground_depth=True)))
    with pytest.raises(ConfigError, match="obstacle_bottom_px_error"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(ground_keypoint=True))),
                                     postprocess=dict(obstacle_ground_depth=True, obstacle_bottom_px_error=0.0)))
