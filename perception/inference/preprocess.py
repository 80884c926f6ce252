"""Camera image -> network input, exactly as evaluation does it (see the export sidecar's "input")."""

from __future__ import annotations

import numpy as np
import torch

from perception.data.camera_dataset import normalize_image
from perception.data.transforms import CameraTransform


def prepare_image(image_rgb: np.ndarray, input_size: tuple[int, int]) -> tuple[torch.Tensor, np.ndarray]:
    """uint8 [H0,W0,3] RGB -> (float32 [3,H,W] normalised, affine [3,3] original px -> input px).

    Scale to the input width, keep the bottom rows: the deterministic evaluation transform.
    """
    if image_rgb.ndim != 3 or image_rgb.shape[2] != 3 or image_rgb.dtype != np.uint8:
        raise ValueError(f"expected a uint8 [H,W,3] RGB image, got {image_rgb.dtype} {image_rgb.shape}")
    transform = CameraTransform(tuple(input_size), train=False)
    out = transform(image_rgb, None, np.zeros((0, 4)), np.zeros((0, 2)), np.eye(3))
    return normalize_image(out["image"]), out["affine"]
