"""Camera images in, every task's result in original-image pixels out: what runs around the exported graph.

Pre-processing (``prepare_image``) -> network (PyTorch or ONNX Runtime) -> the evaluation's
post-processing: drivable mask at the original resolution, lanes and traffic lights in original
pixels, 3D obstacles in the camera frame (needs the camera's intrinsics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from perception.config import PostprocessConfig
from perception.inference.preprocess import prepare_image
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.postprocess.lanes import ImageLanes, decode_lanes
from perception.postprocess.lights import decode_lights
from perception.postprocess.obstacles import CameraBoxes, decode_image


@dataclass
class FramePrediction:
    drivable: np.ndarray | None  # uint8 [H0,W0], 1 = drivable
    lanes: ImageLanes | None
    lights: dict | None  # boxes_xyxy [N,4] original px, labels [N] (LIGHT_STATES), scores [N]
    obstacles: CameraBoxes | None  # camera frame (x right, y down, z forward)


def default_intrinsics(width: int, height: int) -> np.ndarray:
    """A nuScenes front camera's pinhole (f = 1266 px at 1600 px wide) scaled to the image, centred."""
    focal = 1266.0 * width / 1600.0
    return np.array([[focal, 0.0, width / 2.0], [0.0, focal, height / 2.0], [0.0, 0.0, 1.0]])


class Perceiver:
    """``predictor`` maps images [B,3,H,W] to the outputs dict (TorchPredictor or OnnxPredictor)."""

    def __init__(self, predictor, input_size: tuple[int, int], postprocess: PostprocessConfig):
        self.predictor = predictor
        self.input_size = tuple(input_size)
        self.post = postprocess

    def __call__(self, images_rgb: list[np.ndarray], intrinsics: list[np.ndarray] | None = None
                 ) -> list[FramePrediction]:
        """uint8 RGB images (any size) and their [3,3] intrinsics (original pixels; default: see above)."""
        prepared = [prepare_image(image, self.input_size) for image in images_rgb]
        outputs = self.predictor(torch.stack([tensor for tensor, _ in prepared]))
        probability = None
        if "drivable.logits" in outputs:
            probability = drivable_probability(outputs["drivable.logits"], self.input_size).numpy()
        post, results = self.post, []
        for i, (image, (_, affine)) in enumerate(zip(images_rgb, prepared)):
            height, width = image.shape[:2]
            drivable = lanes = lights = obstacles = None
            if probability is not None:
                drivable = to_original_image(probability[i], affine, (width, height))
            if "lanes.logits" in outputs:
                lanes = decode_lanes(outputs, i, self.input_size, affine, post.lane_score_threshold,
                                     post.lane_visibility_threshold)
            if "lights.logits" in outputs:
                lights = decode_lights(outputs, i, self.input_size, affine, post.light_max_per_image,
                                       post.light_score_threshold)
            if "obstacles.logits" in outputs:
                k = intrinsics[i] if intrinsics is not None else default_intrinsics(width, height)
                obstacles = decode_image(outputs, i, affine @ np.asarray(k, np.float64), self.input_size,
                                         post.obstacle_max_per_image, post.obstacle_score_threshold)
            results.append(FramePrediction(drivable, lanes, lights, obstacles))
        return results
