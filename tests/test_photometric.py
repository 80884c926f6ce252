"""The photometric augmentation: each colour jitter against torchvision's, the BGR swap, determinism, noise."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF

from perception.data.photometric import Photometric, hue_rotation

RNG = np.random.default_rng(0)
IMAGE_RGB = (RNG.random((48, 64, 3)) * 255).astype(np.uint8)


def _apply(matrix: np.ndarray, image: np.ndarray) -> np.ndarray:
    return cv2.transform(image, matrix.astype(np.float32))


def _jitter_only(**ranges) -> Photometric:
    """Only the named jitters (ranges given), always applied; no noise or blur."""
    settings = dict(brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0) | ranges
    return Photometric(**settings, jitter_p=1.0, noise_p=0.0, blur_p=0.0)


class _Fixed:
    """A generator stand-in: ``value`` from uniform() over a non-empty range, the identity permutation."""

    def __init__(self, value: float):
        self.value = value

    def uniform(self, low, high):
        return self.value if high > low else low

    def permutation(self, n):
        return np.arange(n)


def _reference(name: str, factor: float) -> np.ndarray:
    tensor = torch.from_numpy(IMAGE_RGB).permute(2, 0, 1)
    adjust = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
              "saturation": TF.adjust_saturation, "hue": TF.adjust_hue}[name]
    return adjust(tensor, factor).permute(1, 2, 0).numpy()


@pytest.mark.parametrize("name,factor", [("brightness", 1.2), ("brightness", 0.8), ("contrast", 1.25),
                                         ("contrast", 0.75), ("saturation", 1.25), ("saturation", 0.75)])
def test_each_jitter_matches_torchvision(name, factor):
    photometric = _jitter_only(**{name: 0.25})
    mean = np.asarray(cv2.mean(IMAGE_RGB)[:3])
    ours = _apply(photometric.colour_matrix(mean, _Fixed(factor)), IMAGE_RGB).astype(float)
    reference = _reference(name, factor).astype(float)
    # torchvision rounds after each op and measures contrast's mean on the image; we round once.
    assert np.abs(ours - reference).max() <= 2.0
    assert np.abs(ours - reference).mean() < 0.6


def test_hue_rotation_shifts_hue_the_way_torchvision_does():
    """The grey-axis rotation approximates HSV's hue shift: same direction, a few grey levels apart."""
    for shift in (0.03, -0.03):
        ours = _apply(np.concatenate([hue_rotation(shift), np.zeros((3, 1))], 1), IMAGE_RGB).astype(float)
        same_way = np.abs(ours - _reference("hue", shift)).mean()
        other_way = np.abs(ours - _reference("hue", -shift)).mean()
        assert same_way < 8.0 and same_way < 0.5 * other_way
    grey = np.full((4, 4, 3), 120, np.uint8)
    np.testing.assert_array_equal(_apply(np.concatenate([hue_rotation(0.03), np.zeros((3, 1))], 1), grey), grey)


def test_bgr_input_comes_out_rgb():
    bgr = cv2.cvtColor(IMAGE_RGB, cv2.COLOR_RGB2BGR)
    photometric = _jitter_only()  # every jitter a no-op: only the channel swap remains
    np.testing.assert_array_equal(photometric(bgr, np.random.default_rng(1), bgr=True), IMAGE_RGB)
    skipped = Photometric(jitter_p=0.0, noise_p=0.0, blur_p=0.0)
    np.testing.assert_array_equal(skipped(bgr, np.random.default_rng(1), bgr=True), IMAGE_RGB)


def test_same_generator_same_augmentation():
    photometric = Photometric(noise_p=0.5, blur_p=0.5)
    outputs = [photometric(IMAGE_RGB, np.random.default_rng(seed)) for seed in (3, 3, 4)]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0], outputs[2])
    assert outputs[0].dtype == np.uint8 and outputs[0].shape == IMAGE_RGB.shape


def test_noise_has_the_drawn_spread():
    grey = np.full((120, 160, 3), 128, np.uint8)
    photometric = Photometric()
    noisy = photometric.add_noise(grey, 6.0, np.random.default_rng(0)).astype(float)
    assert abs(noisy.mean() - 128.0) < 0.3
    assert 5.5 < noisy.std() < 6.5
    again = photometric.add_noise(grey, 6.0, np.random.default_rng(1))
    assert not np.array_equal(noisy, again)  # another window of the bank


def _hue_degrees(image: np.ndarray) -> np.ndarray:
    """Per-pixel hue angle (degrees) in the opponent-colour plane of RGB [..., 3]."""
    rgb = image.reshape(-1, 3).astype(float)
    return np.degrees(np.arctan2((rgb[:, 1] - rgb[:, 2]) * np.sqrt(3) / 2, rgb[:, 0] - (rgb[:, 1] + rgb[:, 2]) / 2))


def test_hue_range_zero_keeps_every_colour_hue_and_every_other_draw():
    """augment.hue=0 (CameraTransform(hue=0)): brightness, contrast and saturation still jitter, the hue of every
    colour stays (synthetic classes differ by colour), and the generator advances as with a hue range, so the rest
    of an item's augmentation is the same."""
    colours = np.array([[40, 84, 150], [150, 30, 35], [150, 60, 100], [150, 70, 20], [30, 140, 140]], np.uint8)
    image = np.repeat(colours[:, None], 8, axis=1)  # (5, 8, 3): patches of saturated colours, clear of clipping
    no_hue, hue = (Photometric(hue=h, jitter_p=1.0, noise_p=0.0, blur_p=0.0) for h in (0.0, 0.03))
    shifted = []
    for seed in range(6):
        rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
        kept, rotated = no_hue(image, rng_a), hue(image, rng_b)
        assert rng_a.random() == rng_b.random()  # the same draws were made
        difference = (_hue_degrees(kept) - _hue_degrees(image) + 180) % 360 - 180
        assert np.abs(difference).max() < 3.0, seed  # uint8 rounding only
        assert not np.array_equal(kept, image)  # the other jitters still act
        shifted.append(np.abs((_hue_degrees(rotated) - _hue_degrees(image) + 180) % 360 - 180).max())
    assert max(shifted) > 4.0  # with a range, some draws turn the hue


def test_camera_transform_and_config_take_the_hue_range():
    from perception.config import ConfigError, parse_config
    from perception.data.transforms import CameraTransform
    from tests.conftest import experiment_dict

    assert CameraTransform((224, 448), train=True, hue=0.0).photometric.hue == 0.0
    assert CameraTransform((224, 448), train=True).photometric.hue == 0.03
    assert parse_config(experiment_dict("/unused", augment=dict(hue=0.0))).augment.hue == 0.0
    with pytest.raises(ConfigError, match=r"augment.hue must be within \[0, 0.5\].*got 0.7"):
        parse_config(experiment_dict("/unused", augment=dict(hue=0.7)))
