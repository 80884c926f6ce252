"""Photometric training augmentation on uint8 images: colour jitter as one 3x4 colour matrix, noise, blur.

Brightness, contrast, saturation and hue are all linear in the colour (hue as a rotation about the
grey axis, the usual hue-rotation matrix), so the four jitters, applied in a random order as
torchvision's ColorJitter does, compose into one affine colour map that ``cv2.transform`` applies
in a single saturating uint8 pass. The decoder's BGR -> RGB swap is folded into the same matrix.
This replaced albumentations' ColorJitter + GaussNoise + GaussianBlur, whose HSV round trip for the
hue and full-size ``randn`` for the noise were a third of the training item's time
(``bench/data_loading.py`` measures both). Every random draw comes from the item's generator, so an
item's augmentation is a function of its key (exact resume).

Contrast pulls towards the image's mean grey *after* the jitters applied before it: the mean colour
is carried through the composed map (exact without clipping; torchvision measures it on the clipped
image).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

GREY_WEIGHTS_RGB = np.array([0.299, 0.587, 0.114])  # ITU-R 601 luma, as torchvision's rgb_to_grayscale
BGR_TO_RGB = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def hue_rotation(fraction: float) -> np.ndarray:
    """[3,3] rotation of RGB about the grey axis by ``fraction`` of a full turn (hue shift)."""
    angle = 2.0 * math.pi * fraction
    axis = np.full(3, 1.0 / math.sqrt(3.0))
    cross = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return math.cos(angle) * np.eye(3) + math.sin(angle) * cross + (1.0 - math.cos(angle)) * np.outer(axis, axis)


class Photometric:
    """Random colour jitter (probability ``jitter_p``), Gaussian noise and blur on uint8 [H,W,3] images."""

    def __init__(self, brightness: float = 0.25, contrast: float = 0.25, saturation: float = 0.25, hue: float = 0.03,
                 jitter_p: float = 0.8, noise_std: tuple[float, float] = (0.01, 0.04), noise_p: float = 0.2,
                 blur_kernels: tuple[int, ...] = (3, 5), blur_p: float = 0.1):
        """Ranges as torchvision's ColorJitter: factors in [1 - x, 1 + x], hue shift in [-hue, hue] turns;
        ``noise_std`` as a fraction of 255."""
        self.brightness, self.contrast, self.saturation, self.hue = brightness, contrast, saturation, hue
        self.jitter_p, self.noise_std, self.noise_p = jitter_p, noise_std, noise_p
        self.blur_kernels, self.blur_p = blur_kernels, blur_p
        self._noise_bank = np.zeros(0, np.float32)  # standard normal values, grown on first use

    def colour_matrix(self, mean_rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """[3,4] affine map of RGB colours (0-255) for one random jitter; ``mean_rgb`` [3]: the image's mean."""
        affine = np.eye(4)
        for op in rng.permutation(4):
            linear, offset = np.eye(3), np.zeros(3)
            if op == 0:
                linear = rng.uniform(1 - self.brightness, 1 + self.brightness) * np.eye(3)
            elif op == 1:
                factor = rng.uniform(1 - self.contrast, 1 + self.contrast)
                mean_now = affine[:3, :3] @ mean_rgb + affine[:3, 3]
                linear, offset = factor * np.eye(3), np.full(3, (1 - factor) * GREY_WEIGHTS_RGB @ mean_now)
            elif op == 2:
                factor = rng.uniform(1 - self.saturation, 1 + self.saturation)
                linear = factor * np.eye(3) + (1 - factor) * np.outer(np.ones(3), GREY_WEIGHTS_RGB)
            else:
                linear = hue_rotation(rng.uniform(-self.hue, self.hue))
            step = np.eye(4)
            step[:3, :3], step[:3, 3] = linear, offset
            affine = step @ affine
        return affine[:3]

    def __call__(self, image: np.ndarray, rng: np.random.Generator, bgr: bool = False) -> np.ndarray:
        """uint8 [H,W,3] (RGB, or BGR with ``bgr``) -> augmented uint8 [H,W,3] RGB."""
        swap = BGR_TO_RGB if bgr else np.eye(3)
        if rng.random() < self.jitter_p:
            mean_rgb = swap @ np.asarray(cv2.mean(image)[:3])
            matrix = self.colour_matrix(mean_rgb, rng)
            matrix = np.concatenate([matrix[:, :3] @ swap, matrix[:, 3:]], axis=1)
            image = cv2.transform(image, matrix.astype(np.float32))
        elif bgr:
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        if rng.random() < self.noise_p:
            image = self.add_noise(image, rng.uniform(*self.noise_std) * 255.0, rng)
        if rng.random() < self.blur_p:
            size = int(rng.choice(self.blur_kernels))
            image = cv2.GaussianBlur(image, (size, size), 0)
        return image

    def add_noise(self, image: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
        """Per-pixel, per-channel Gaussian noise of ``std`` (0-255 units), rounded and clipped.

        The noise is a window of a fixed bank of normal values at a random offset: drawing a
        million normals per image cost more than the rest of the augmentation.
        """
        count = image.size
        if self._noise_bank.size < 2 * count:
            self._noise_bank = np.random.default_rng(0).standard_normal(2 * count, dtype=np.float32)
        start = int(rng.integers(0, self._noise_bank.size - count + 1))
        noise = self._noise_bank[start:start + count].reshape(image.shape)
        noisy = cv2.scaleAdd(noise, float(std), image.astype(np.float32))
        return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
