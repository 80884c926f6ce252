"""3D obstacles: a DETR-style head on FPN tokens, nuScenes detection classes, scored by the official devkit.

Labels: nuScenes only (BDD100K has no 3D boxes). Targets per camera image in input pixels and the
camera frame (x right, y down, z forward); predictions go to the global frame and are merged across
the cameras of a sample before the devkit's DetectionEval scores them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from perception.core.errors import ConfigError
from perception.core.nuscenes_constants import DETECTION_CLASSES
from perception.core.obstacle_coding import ATTRIBUTE_NAMES, F_REF, attribute_index
from perception.losses.obstacle_loss import ObstacleCriterion
from perception.postprocess.ground_depth import GroundDepth, ground_in_camera
from perception.postprocess.obstacles import decode_image, merge_cameras, to_global
from perception.tasks.base import ScoringContext, Task, box_set_criterion, validate_box_query_head
from perception.tasks.decoder_config import BoxQueryConfig


@dataclass
class ObstacleHeadConfig(BoxQueryConfig):
    dim: int = 128  # 64 trains faster on small data
    num_queries: int = 100
    num_layers: int = 3
    ffn_dim: int = 512
    geometric_depth: bool = False  # depth as a residual on fx * H / h from the query's box and 3D height
    # > 0: the heading as MultiBin classification over this many bins + a (sin, cos) residual per bin (Deep3DBox)
    # instead of one (sin, cos) regression, which an image that hides front from back pulls to the mean (0, 0).
    yaw_bins: int = 0
    # Also predict the depth's Laplace scale (obstacles.depth_log_scale; MonoDLE / GUPNet): the depth loss becomes
    # the Laplace negative log-likelihood (postprocess.obstacle_depth_confidence can also rank by it).
    depth_uncertainty: bool = False
    # Training only: every memory token also regresses the depth of the object it would detect, trained by the dense
    # loss on the box ATSS positives (FCOS3D / MonoDETR's foreground depth; not in the exported graph).
    dense_depth: bool = False
    # Also place the image row of each box's bottom centre (obstacles.bottom): with postprocess.obstacle_ground_depth
    # the decoder turns it into depth from the camera's height over flat ground and fuses that with the regression.
    ground_keypoint: bool = False


def empty_obstacles() -> dict:
    """Obstacle targets of an image without obstacle labels (valid False)."""
    return {"valid": False, "boxes_xyxy": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64),
            "center_uv": torch.zeros(0, 2), "center_cam": torch.zeros(0, 3), "size_wlh": torch.zeros(0, 3),
            "yaw": torch.zeros(0), "velocity": torch.zeros(0, 2), "attributes": torch.zeros(0, dtype=torch.int64),
            "intrinsics": torch.eye(3)}


def nuscenes_obstacle_targets(info: dict, out: dict) -> dict:
    """A label-cache info's obstacles after the transform (``out``: boxes kept by the crop, flip, intrinsics)."""
    obstacles = info["obstacles"]
    keep = out["box_indices"]
    centre_cam = np.asarray(obstacles["center_cam"], np.float32).reshape(-1, 3)[keep]
    yaw = np.asarray(obstacles["yaw_cam"], np.float32).reshape(-1)[keep]
    velocity = np.asarray(obstacles["velocity_cam"], np.float32).reshape(-1, 2)[keep]
    if out["params"].flip:  # mirrored world: x -> -x
        centre_cam[:, 0] *= -1
        yaw = -yaw
        velocity[:, 0] *= -1
    return {
        "valid": True,
        "boxes_xyxy": torch.from_numpy(out["boxes_xyxy"]),  # input-image pixels
        "labels": torch.as_tensor(np.asarray(obstacles["label"], np.int64).reshape(-1)[keep]),
        "center_uv": torch.from_numpy(out["keypoints_uv"][keep]),  # projected 3D centre, input px
        "center_cam": torch.from_numpy(centre_cam),  # metres, camera frame (x right, y down, z fwd)
        "size_wlh": torch.as_tensor(np.asarray(obstacles["size_wlh"], np.float32).reshape(-1, 3)[keep]),
        "yaw": torch.from_numpy(yaw),  # atan2(h_x, h_z) in the camera frame
        "velocity": torch.from_numpy(velocity),  # (v_x, v_z) m/s, camera frame
        "attributes": torch.as_tensor([attribute_index(a) for a in obstacles["attribute"]],
                                      dtype=torch.int64).reshape(-1)[keep],  # -1: none
        "intrinsics": torch.as_tensor(out["intrinsics"], dtype=torch.float32),  # input image
    }


class ObstacleTask(Task):
    name = "obstacles"
    config_class = ObstacleHeadConfig
    labelled_datasets = ("nuscenes",)
    loss_names = ObstacleCriterion.loss_names
    output_meanings = {
        "obstacles.logits": "[B,Q,C] class logits, sigmoid per class (no background class); C = obstacle classes",
        "obstacles.boxes": "[B,Q,4] 2D box (cx, cy, w, h) normalised to [0, 1] of the network input",
        "obstacles.center": "[B,Q,2] projected 3D box centre (u, v) normalised to [0, 1] of the network input",
        "obstacles.depth": f"[B,Q] depth code: depth_m = exp(code) * fx_input / {F_REF:g} (fx of the network input)",
        "obstacles.depth_log_scale": ("[B,Q] (with model.heads.obstacles.depth_uncertainty) log of the Laplace scale "
                                      "b of the depth code; with postprocess.obstacle_depth_confidence the decoder "
                                      "multiplies the class score by 1 - exp(-1 m / (depth_m x b)), the chance the "
                                      "depth is within 1 m"),
        "obstacles.size": "[B,Q,3] log of (width, length, height) in metres",
        "obstacles.yaw": "[B,Q,2] (sin, cos) of the yaw in the camera frame (x right, y down, z forward)",
        "obstacles.velocity": "[B,Q,2] (v_x, v_z) m/s in the camera frame",
        "obstacles.bottom": ("[B,Q] (with model.heads.obstacles.ground_keypoint) row v of the box's bottom centre (the "
                             "projected 3D centre moved half its height down to the ground), normalised to [0, 1] of "
                             "the network input; with postprocess.obstacle_ground_depth the decoder intersects the ray "
                             "through (center u, bottom v) with the ground plane (ego z = 0) and fuses that depth with "
                             "the regressed one"),
        "obstacles.attribute": "[B,Q,A] attribute logits (argmax over the class's allowed attributes)",
    }
    class_names = {"obstacles": list(DETECTION_CLASSES), "obstacle_attributes": list(ATTRIBUTE_NAMES)}
    postprocess_code = "perception.postprocess.obstacles.decode_image (sigmoid -> top-k, no NMS) + to_global"
    query_outputs = True

    def validate(self, head: ObstacleHeadConfig, cfg) -> None:
        validate_box_query_head(self.name, head)
        if head.yaw_bins == 1 or head.yaw_bins < 0:
            raise ConfigError(f"model.heads.obstacles.yaw_bins must be 0 (a (sin, cos) regression) or >= 2, "
                              f"got {head.yaw_bins}")
        post = cfg.postprocess
        if post.obstacle_ground_depth and not head.ground_keypoint:
            raise ConfigError("postprocess.obstacle_ground_depth needs the bottom-centre rows the head places with "
                              "model.heads.obstacles.ground_keypoint=True")
        for key in ("obstacle_bottom_px_error", "obstacle_depth_relative_error"):
            if not getattr(post, key) > 0:
                raise ConfigError(f"postprocess.{key} must be > 0, got {getattr(post, key)!r}")

    def build_head(self, head: ObstacleHeadConfig, in_channels: int, input_size: tuple[int, int]):
        from perception.models.heads.obstacles import ObstacleHead

        return ObstacleHead(in_channels, **head.decoder_kwargs(), yaw_bins=head.yaw_bins,
                            depth_uncertainty=head.depth_uncertainty, dense_depth=head.dense_depth,
                            ground_keypoint=head.ground_keypoint,
                            input_height=input_size[0] if head.geometric_depth else None)

    def build_criterion(self, cfg):
        return box_set_criterion(ObstacleCriterion, cfg.matcher, one_to_many_iou=cfg.matcher.obstacle_one_to_many_iou,
                                 one_to_many_regression=cfg.matcher.obstacle_one_to_many_regression)

    def empty_targets(self) -> dict:
        return empty_obstacles()

    def item_targets(self, dataset, info: dict, out: dict) -> dict | None:
        return nuscenes_obstacle_targets(info, out) if dataset.name == "nuscenes" else None

    def decode(self, outputs, i, input_size, affine, orig_size, post, input_intrinsics=None, ego_from_camera=None):
        """CameraBoxes in the camera frame; ``input_intrinsics``: the camera's intrinsics in input pixels;
        ``ego_from_camera`` [4,4] (nuScenes' ego frame: z up, z = 0 on the ground): with
        ``postprocess.obstacle_ground_depth``, depth also from the ground plane."""
        ground = None
        if post.obstacle_ground_depth and ego_from_camera is not None:
            ground = GroundDepth(*ground_in_camera(np.asarray(ego_from_camera, np.float64)),
                                 post.obstacle_bottom_px_error, post.obstacle_depth_relative_error)
        return decode_image(outputs, i, input_intrinsics, tuple(input_size), post.obstacle_max_per_image,
                            post.obstacle_score_threshold, post.obstacle_nms_iou, post.obstacle_depth_confidence,
                            ground)

    def draw(self, canvas, prediction, intrinsics, min_score) -> None:
        from perception.drawing import draw_boxes_3d

        draw_boxes_3d(canvas, prediction, intrinsics, min_score)

    def bev_entries(self, prediction, min_score: float) -> list:
        from perception.drawing import camera_bev_entries

        return camera_bev_entries(prediction, min_score)

    def image_result(self, cfg, dataset, outputs, i, meta, info) -> dict:
        if meta["dataset"] != "nuscenes":
            return {}
        boxes = self.decode(outputs, i, cfg.input_size, meta["affine"], meta["orig_size"], cfg.postprocess,
                            meta["intrinsics"], meta["ego_from_camera"])
        result = {"boxes": to_global(boxes, meta["ego_from_camera"], meta["global_from_ego"])}
        if info is not None:
            from perception.scoring.frame_scores import obstacle_frame_counts, visible_truth_boxes

            result["obstacle_counts"] = obstacle_frame_counts(boxes, visible_truth_boxes(info,
                                                                                         cfg.min_obstacle_visibility))
        return result

    def score(self, results: list[dict], context: ScoringContext) -> dict[str, float]:
        """A nuScenes submission JSON of the split (cameras merged per sample), scored by the devkit."""
        from perception.scoring.nuscenes_detection import run_detection_eval, write_submission

        start = time.perf_counter()
        per_sample: dict[str, list[dict]] = {}
        for result in results:  # in image-key order, whatever the number of ranks
            if "boxes" in result:
                per_sample.setdefault(result["sample_token"], []).extend(result["boxes"])
        sample_tokens = list(dict.fromkeys(info["sample_token"] for info in context.sources[0].infos))
        scale = context.cfg.postprocess.obstacle_merge_radius_scale
        merged = {token: merge_cameras(boxes, radius_scale=scale) for token, boxes in per_sample.items()}
        results_path = context.results_path or os.path.join(context.work_dir, f"results_nusc_{context.split}.json")
        write_submission(merged, sample_tokens, results_path)
        context.timings["postprocess_s"] = context.timings.get("postprocess_s", 0.0) + time.perf_counter() - start
        if context.format_only:
            return {}
        from perception.data.tables import load_nuscenes

        start = time.perf_counter()
        cfg = context.cfg
        output_dir = os.path.join(context.work_dir, f"nuscenes_eval_{context.split}")
        os.makedirs(output_dir, exist_ok=True)
        metrics = run_detection_eval(load_nuscenes(cfg.data_root, cfg.version), results_path, context.split,
                                     output_dir, plot_dir=context.plot_dir)
        context.timings["devkit_s"] = context.timings.get("devkit_s", 0.0) + time.perf_counter() - start
        return metrics


OBSTACLES = ObstacleTask()
