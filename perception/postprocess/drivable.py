"""Drivable-area logits at stride 4 of the network input -> a mask at the original image size."""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def _index_affine(affine: np.ndarray) -> np.ndarray:
    """Continuous-pixel affine (pixel i spans [i, i+1)) -> OpenCV's pixel-index convention."""
    to_continuous = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
    to_index = np.array([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])
    return to_index @ affine @ to_continuous


def drivable_probability(logits: torch.Tensor, input_size: tuple[int, int]) -> torch.Tensor:
    """logits [B,K,h,w] -> P(drivable) [B,H,W] at the network-input size (H, W)."""
    logits = F.interpolate(logits.float(), size=tuple(input_size), mode="bilinear", align_corners=False)
    return logits.softmax(dim=1)[:, 1]


def to_original_image(probability: np.ndarray, affine: np.ndarray, orig_size: tuple[int, int],
                      threshold: float = 0.5) -> np.ndarray:
    """P(drivable) [H,W] in input pixels -> uint8 mask [H0,W0] (1 = drivable) in original pixels.

    ``affine`` [3,3] maps original -> input pixels (from the transform); regions of the
    original image the network never saw (cropped sky) are "not drivable".
    """
    width, height = orig_size
    matrix = _index_affine(np.asarray(affine, np.float64))[:2]
    warped = cv2.warpAffine(probability.astype(np.float32), matrix, (int(width), int(height)),
                            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_CONSTANT,
                            borderValue=0.0)
    return (warped > threshold).astype(np.uint8)
