"""Camera-image augmentation that keeps image, mask, 2D boxes, keypoints and intrinsics consistent.

Geometry is resize -> crop -> optional horizontal flip, one affine map drawn here: the source
pixels that land inside the input are resized onto their place in one ``cv2.resize`` (bilinear for
the image, nearest for the mask; outside the image = ignore), then mirrored. The window is rounded
to whole pixels and the affine returned is the one applied (x and y scales may differ by a part in
a thousand); boxes, keypoints and intrinsics follow it analytically, so a 3D point projected with
the new intrinsics lands on the pixel where its image content moved (tested on rendered images).
This replaced albumentations' resize + pad + crop + flip (2x faster), then one ``cv2.warpAffine``
per image (2.5x slower than resizing the window: bench/data_loading.py).
Photometric augmentation (perception.data.photometric) draws from the same per-item generator.

A horizontal flip mirrors the world seen by the camera: the intrinsics keep fx > 0 and the
3D targets are mirrored in the camera frame (x -> -x, yaw -> -yaw, v_x -> -v_x).

Evaluation uses the deterministic version: scale so the width matches, keep the bottom rows
(the sky is cropped away), no flip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from perception.data.drivable_projection import IGNORE_INDEX
from perception.data.photometric import Photometric

IMAGENET_MEAN_RGB = (0.485, 0.456, 0.406)
IMAGENET_STD_RGB = (0.229, 0.224, 0.225)


@dataclass
class GeometryParams:
    """The sampled resize -> crop -> flip; the map applied (whole pixels) is the transform's ``affine``."""

    scale: float  # resize factor applied to the original image
    crop_x: int  # top-left of the crop in the resized (and padded) image
    crop_y: int
    flip: bool


class CameraTransform:
    """Callable producing a dict with the transformed sample (see ``__call__``)."""

    def __init__(self, input_size: tuple[int, int], train: bool, scale_range=(0.9, 1.15), flip_prob: float = 0.5,
                 photometric: bool = True, seed: int | None = None, keep_principal_row: bool = False,
                 hue: float = 0.03):
        self.input_height, self.input_width = input_size
        self.train = train
        self.scale_range = scale_range
        self.flip_prob = flip_prob
        self.keep_principal_row = keep_principal_row
        self.rng = np.random.default_rng(seed)
        # hue: the jitter's hue shift range in turns (0: none; the draw still happens, so the rest of an item's
        # augmentation is the same as with any other range)
        self.photometric = Photometric(hue=hue) if train and photometric else None

    def reseed(self, rng: np.random.Generator) -> None:
        """Make the next item's augmentation a function of ``rng`` (see perception.data.sampling)."""
        self.rng = rng

    def sample_params(self, width: int, height: int, principal_row: float | None = None) -> GeometryParams:
        """``principal_row``: the image's cy (original pixels); with ``keep_principal_row`` the crop puts it
        on the row evaluation puts it on."""
        base = self.input_width / width
        evaluation_crop_y = max(int(round(height * base)) - self.input_height, 0)
        if not self.train:
            return GeometryParams(base, 0, evaluation_crop_y, False)
        scale = base * float(self.rng.uniform(*self.scale_range))
        resized_w, resized_h = int(round(width * scale)), int(round(height * scale))
        crop_x = int(self.rng.integers(0, max(resized_w - self.input_width, 0) + 1))
        lowest = max(resized_h - self.input_height, 0)
        if self.keep_principal_row and principal_row is not None:
            # A level camera h metres over flat ground sees a foot at row v at depth fy * h / (v - cy): with cy
            # fixed in the input, a row means one depth code (log(z * F_REF / fx), which the scale does not
            # change). Clamped to the image: below the evaluation scale the bottom rows run out and cy sits up
            # to (1 - scale / base) x base x (H - cy) input rows lower.
            wanted = principal_row * scale - (principal_row * base - evaluation_crop_y)
            crop_y = int(min(max(round(wanted), 0), lowest))
        else:  # vertically, stay near the bottom: the sky carries little signal
            crop_y = int(self.rng.integers(max(lowest - int(0.15 * self.input_height), 0), lowest + 1))
        return GeometryParams(scale, crop_x, crop_y, bool(self.rng.random() < self.flip_prob))

    def __call__(self, image: np.ndarray, mask: np.ndarray | None, boxes_xyxy: np.ndarray, keypoints_uv: np.ndarray,
                 intrinsics: np.ndarray, params: GeometryParams | None = None, bgr: bool = False) -> dict:
        """image [H,W,3] uint8 RGB (BGR with ``bgr``: the output is RGB either way), mask [H,W] uint8 or None,
        boxes [N,4] xyxy px, keypoints [N,2] px.

        Returns image [h,w,3] uint8 RGB, mask [h,w], boxes [M,4], box_indices [M] (which input boxes
        survived), keypoints [N,2], intrinsics [3,3], params, affine [3,3] (orig px -> input px).
        """
        height, width = image.shape[:2]
        params = params or self.sample_params(width, height)
        size = (self.input_width, self.input_height)
        (sx0, sx1, dx0, dx1), (sy0, sy1, dy0, dy1) = (
            _axis_window(params.scale, params.crop_x, self.input_width, width),
            _axis_window(params.scale, params.crop_y, self.input_height, height))
        # The map actually applied: whole source pixels [s0, s1) onto whole input pixels [d0, d1) per axis
        # (continuous coordinates, pixel i covers [i, i+1)); within 1/(d1 - d0) of the sampled scale.
        affine = np.eye(3)
        affine[0, 0], affine[1, 1] = (dx1 - dx0) / max(sx1 - sx0, 1), (dy1 - dy0) / max(sy1 - sy0, 1)
        affine[0, 2], affine[1, 2] = dx0 - sx0 * affine[0, 0], dy0 - sy0 * affine[1, 1]
        if params.flip:
            affine = np.array([[-1.0, 0.0, self.input_width], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ affine
        window = (slice(sy0, sy1), slice(sx0, sx1)), (slice(dy0, dy1), slice(dx0, dx1))
        warped_image = _resize_window(image, window, size, cv2.INTER_LINEAR, 0, params.flip)
        warped_mask = None
        if mask is not None:  # nearest with centre-aligned sampling; outside the image = ignore
            warped_mask = _resize_window(mask, window, size, cv2.INTER_NEAREST_EXACT, IGNORE_INDEX, params.flip)
        if self.photometric is not None:
            warped_image = self.photometric(warped_image, self.rng, bgr=bgr)
        elif bgr:
            warped_image = cv2.cvtColor(warped_image, cv2.COLOR_BGR2RGB)
        boxes, box_indices = _transform_boxes(np.asarray(boxes_xyxy, np.float64).reshape(-1, 4), affine, size)

        # Intrinsics and keypoints follow the same affine (continuous pixel coordinates, pixel i
        # covers [i, i+1)). A flip is absorbed by mirroring the 3D targets (x -> -x), so fx stays positive.
        new_k = affine @ np.asarray(intrinsics, dtype=np.float64)
        if params.flip:
            new_k = new_k @ np.diag([-1.0, 1.0, 1.0])
        keypoints = np.asarray(keypoints_uv, np.float64).reshape(-1, 2)
        keypoints = keypoints @ affine[:2, :2].T + affine[:2, 2]
        return {
            "image": warped_image,
            "mask": warped_mask,
            "boxes_xyxy": boxes.astype(np.float32),
            "box_indices": box_indices,
            "keypoints_uv": keypoints.astype(np.float32),
            "intrinsics": new_k,
            "params": params,
            "affine": affine,
        }


def _axis_window(scale: float, crop: int, out_len: int, src_len: int) -> tuple[int, int, int, int]:
    """One axis of resize-then-crop: whole source pixels [s0, s1) and the whole input pixels [d0, d1) they
    fill, for the map d = s * scale - crop (continuous coordinates)."""
    eps = 1e-6  # 28 / 0.7 is 40.000000000000004 in floating point
    s0 = max(0, math.ceil(crop / scale - eps))
    s1 = min(src_len, math.floor((crop + out_len) / scale + eps))
    d0, d1 = round(s0 * scale - crop), round(s1 * scale - crop)
    if s1 <= s0 or d1 <= d0:  # nothing of the image is inside the input
        return 0, 0, 0, 0
    return s0, s1, d0, d1


def _resize_window(image: np.ndarray, window, size: tuple[int, int], interpolation: int, fill: int,
                   flip: bool) -> np.ndarray:
    """Resize the source window onto its input window, ``fill`` elsewhere, then mirror if ``flip``.

    ``cv2.resize`` samples pixel centres ((d + 0.5) / a - 0.5) exactly as the affine says, and on the
    window alone it is 2.5x faster than ``cv2.warpAffine`` of the same map (bench/data_loading.py)."""
    (source_rows, source_cols), (rows, cols) = window
    width, height = size
    patch = image[source_rows, source_cols]
    target = (cols.stop - cols.start, rows.stop - rows.start)
    if target == (width, height):
        out = cv2.resize(patch, target, interpolation=interpolation)
    else:
        out = np.full((height, width) + image.shape[2:], fill, dtype=image.dtype)
        if target[0] > 0 and target[1] > 0:  # (0, 0): no source pixel lands in the input
            out[rows, cols] = cv2.resize(patch, target, interpolation=interpolation)
    return cv2.flip(out, 1) if flip else out


MIN_BOX_AREA = 4.0  # px^2 inside the input after clipping; smaller boxes are dropped


def _transform_boxes(boxes: np.ndarray, affine: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """xyxy boxes [N,4] (original px) -> (clipped input-px boxes [M,4], indices [M] of the kept ones)."""
    if not len(boxes):
        return np.zeros((0, 4)), np.zeros(0, np.int64)
    xs = boxes[:, [0, 2]] * affine[0, 0] + affine[0, 2]
    ys = boxes[:, [1, 3]] * affine[1, 1] + affine[1, 2]
    width, height = size
    out = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], axis=1)  # a flip swaps x0 and x1
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, width)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, height)
    keep = np.flatnonzero((out[:, 2] - out[:, 0]) * (out[:, 3] - out[:, 1]) >= MIN_BOX_AREA)
    return out[keep], keep.astype(np.int64)
