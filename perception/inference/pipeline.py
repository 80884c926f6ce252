"""Camera images in, every task's result in original-image pixels out: what runs around the exported graph.

Pre-processing (``prepare_image``) -> network (PyTorch or ONNX Runtime) -> each enabled task's
post-processing (``Task.decode``, the evaluation's): e.g. the drivable mask at the original
resolution, lanes and traffic lights in original pixels, 3D obstacles in the camera frame (these
need the camera's intrinsics).
"""

from __future__ import annotations

import numpy as np
import torch

from perception.config import PostprocessConfig
from perception.inference.preprocess import prepare_image


class FramePrediction(dict):
    """One image's results by task name (e.g. ``prediction["lanes"]``, or ``prediction.lanes``); a task the
    model does not have reads as None. The drivable mask is uint8 [H0,W0]; lanes ImageLanes; lights a dict
    of boxes_xyxy [N,4] original px, labels [N], scores [N]; obstacles CameraBoxes in the camera frame
    (x right, y down, z forward)."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get(name)


def default_intrinsics(width: int, height: int) -> np.ndarray:
    """A nuScenes front camera's pinhole (f = 1266 px at 1600 px wide) scaled to the image, centred."""
    focal = 1266.0 * width / 1600.0
    return np.array([[focal, 0.0, width / 2.0], [0.0, focal, height / 2.0], [0.0, 0.0, 1.0]])


class Perceiver:
    """``predictor`` maps images [B,3,H,W] to the outputs dict (TorchPredictor or OnnxPredictor); ``tasks``:
    the enabled task specs (``cfg.model.heads.enabled``)."""

    def __init__(self, predictor, input_size: tuple[int, int], postprocess: PostprocessConfig, tasks: tuple):
        self.predictor = predictor
        self.input_size = tuple(input_size)
        self.post = postprocess
        self.tasks = tuple(tasks)

    def __call__(self, images_rgb: list[np.ndarray], intrinsics: list[np.ndarray] | None = None
                 ) -> list[FramePrediction]:
        """uint8 RGB images (any size) and their [3,3] intrinsics (original pixels; default: see above)."""
        prepared = [prepare_image(image, self.input_size) for image in images_rgb]
        outputs = self.predictor(torch.stack([tensor for tensor, _ in prepared]))
        results = []
        for i, (image, (_, affine)) in enumerate(zip(images_rgb, prepared)):
            height, width = image.shape[:2]
            k = intrinsics[i] if intrinsics is not None else default_intrinsics(width, height)
            input_intrinsics = affine @ np.asarray(k, np.float64)
            results.append(FramePrediction({task.name: task.decode(outputs, i, self.input_size, affine, (width, height),
                                                                   self.post, input_intrinsics)
                                            for task in self.tasks}))
        return results
