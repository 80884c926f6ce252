"""Augmentations keep image, mask, boxes, keypoints and intrinsics consistent."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from perception.core.geometry import project_points
from perception.data.transforms import CameraTransform, GeometryParams
from perception.tasks import CAMERA_TASKS

INTRINSICS = np.array([[400.0, 0.0, 322.0], [0.0, 400.0, 176.0], [0.0, 0.0, 1.0]])
POINT = np.array([[-2.5, 0.8, 12.0]])  # camera frame, metres


def _scene_image():
    """A 640x360 image with a bright disc at the projection of POINT, and a mask of that disc."""
    uv, _ = project_points(POINT, INTRINSICS)
    image = np.zeros((360, 640, 3), np.uint8)
    mask = np.zeros((360, 640), np.uint8)
    centre = (uv[0] * 16).round().astype(int)  # subpixel centre, 4 fractional bits
    cv2.circle(image, tuple(centre - 8), 6 * 16, (255, 255, 255), -1, lineType=cv2.LINE_AA, shift=4)
    cv2.circle(mask, tuple(centre - 8), 6 * 16, 1, -1, shift=4)
    return image, mask, uv


def _centroid(gray):
    weights = gray.astype(np.float64)
    ys, xs = np.mgrid[0:gray.shape[0], 0:gray.shape[1]]
    # +0.5: pixel i covers [i, i+1) in the continuous convention the projection uses
    return np.array([(weights * xs).sum() / weights.sum() + 0.5, (weights * ys).sum() / weights.sum() + 0.5])


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("scale", [0.55, 0.8])
def test_projected_point_lands_on_the_same_pixel(flip, scale):
    image, mask, uv = _scene_image()
    box = np.array([[uv[0, 0] - 6, uv[0, 1] - 6, uv[0, 0] + 6, uv[0, 1] + 6]])
    transform = CameraTransform((160, 320), train=True, photometric=False)
    out = transform(image, mask, box, uv, INTRINSICS, GeometryParams(scale=scale, crop_x=17, crop_y=29, flip=flip))
    point = POINT.copy()
    if flip:
        point[:, 0] *= -1  # the 3D targets are mirrored, fx stays positive
    assert out["intrinsics"][0, 0] > 0
    projected, _ = project_points(point, out["intrinsics"])
    # 1) the image content moved where the new intrinsics project the 3D point
    assert np.abs(_centroid(out["image"][..., 0]) - projected[0]).max() < 0.35
    # 2) keypoints, mask and box moved the same way
    assert np.abs(out["keypoints_uv"][0] - projected[0]).max() < 1e-4
    assert np.abs(_centroid(out["mask"] == 1) - projected[0]).max() < 0.6
    box_centre = out["boxes_xyxy"][0].reshape(2, 2).mean(axis=0)
    assert np.abs(box_centre - projected[0]).max() < 0.6


def test_eval_transform_keeps_bottom_rows_and_full_width():
    transform = CameraTransform((224, 448), train=False)
    params = transform.sample_params(1600, 900)
    assert params.scale == pytest.approx(448 / 1600)
    assert params.crop_x == 0 and params.crop_y == round(900 * 448 / 1600) - 224 and not params.flip


def test_keep_principal_row_puts_cy_on_the_evaluation_row_in_every_crop():
    image = np.zeros((360, 640, 3), np.uint8)
    evaluation = CameraTransform((224, 448), train=False)(image, None, np.zeros((0, 4)), np.zeros((0, 2)), INTRINSICS)
    evaluation_cy = evaluation["intrinsics"][1, 2]
    base = 448 / 640  # the evaluation scale
    kept = CameraTransform((224, 448), train=True, photometric=False, scale_range=(0.9, 1.15), keep_principal_row=True,
                           seed=0)
    free = CameraTransform((224, 448), train=True, photometric=False, scale_range=(0.9, 1.15), seed=0)
    kept_rows, free_rows = [], []
    for _ in range(200):
        for transform, rows in ((kept, kept_rows), (free, free_rows)):
            params = transform.sample_params(640, 360, principal_row=INTRINSICS[1, 2])
            out = transform(image, None, np.zeros((0, 4)), np.zeros((0, 2)), INTRINSICS, params)
            rows.append((params.scale / base, out["intrinsics"][1, 2]))
    for relative_scale, cy in kept_rows:
        if relative_scale >= 1.0:  # the resized image reaches below the input: cy exactly where evaluation has it
            assert abs(cy - evaluation_cy) <= 1.0  # whole-pixel crop and window
        else:  # it does not: the bottom rows are kept, cy sits at most (1 - scale) x (H - cy) lower
            assert evaluation_cy - 1.0 <= cy <= evaluation_cy + (1 - relative_scale) * base * (360 - 176) + 1.0
    spread = lambda rows: np.ptp([cy for _, cy in rows])  # noqa: E731
    print(f"cy spread over 200 crops: kept {spread(kept_rows):.1f} px, free {spread(free_rows):.1f} px")
    assert spread(kept_rows) < 16 and spread(free_rows) > 35  # measured 13.8 and 46.2 px


def test_boxes_leaving_the_crop_are_dropped_with_their_index():
    image = np.zeros((360, 640, 3), np.uint8)
    boxes = np.array([[10, 10, 40, 40], [300, 200, 340, 260]], np.float32)  # first one ends up cropped away
    out = CameraTransform((160, 320), train=True, photometric=False)(
        image, None, boxes, boxes[:, :2], INTRINSICS, GeometryParams(0.6, 40, 40, False))
    assert out["box_indices"].tolist() == [1]
    assert out["keypoints_uv"].shape == (2, 2)  # keypoints stay aligned with the input boxes


def test_padding_marks_unknown_mask_pixels_ignore():
    image = np.zeros((100, 200, 3), np.uint8)
    mask = np.ones((100, 200), np.uint8)
    out = CameraTransform((64, 128), train=True, photometric=False)(
        image, mask, np.zeros((0, 4)), np.zeros((0, 2)), INTRINSICS, GeometryParams(0.5, 0, 0, False))
    assert out["mask"].shape == (64, 128)
    assert np.all(out["mask"][50:] == 255) and np.all(out["mask"][:50, :100] == 1)


def test_half_resolution_decoding_gives_the_same_sample(small_dataset, tmp_path):
    """When the input is at most half the image size, decoding the JPEG at half size (in the DCT
    domain) must give the same geometry and nearly the same pixels as full decoding + resize."""
    from perception.data.camera_dataset import NuScenesCameraDataset
    from perception.data.datamodule import ensure_label_cache

    infos, directory = ensure_label_cache(small_dataset, "v1.0-trainval", "synthetic_val", ["CAM_FRONT"],
                                          str(tmp_path / "cache"), 60.0)
    transform = CameraTransform((128, 224), train=False)  # 480x270 -> 224 wide: scale 0.467
    full = NuScenesCameraDataset(small_dataset, infos, directory, transform, reduced_decoding=False,
                                 tasks=CAMERA_TASKS)
    half = NuScenesCameraDataset(small_dataset, infos, directory, transform, reduced_decoding=True,
                                 tasks=CAMERA_TASKS)
    for index in range(len(infos)):
        a, b = full[index], half[index]
        np.testing.assert_allclose(a["meta"]["affine"], b["meta"]["affine"], atol=1e-9)
        np.testing.assert_allclose(a["meta"]["intrinsics"], b["meta"]["intrinsics"], atol=1e-9)
        ta, tb = a["targets"]["obstacles"], b["targets"]["obstacles"]
        assert torch.equal(ta["labels"], tb["labels"])
        np.testing.assert_allclose(ta["center_uv"], tb["center_uv"], atol=1e-4)
        np.testing.assert_allclose(ta["boxes_xyxy"], tb["boxes_xyxy"], atol=1.0)
        # uint8 images: at most ~6 grey levels apart on average.
        assert (a["image"].float() - b["image"].float()).abs().mean() < 6.0
        same = (a["targets"]["drivable"]["mask"] == b["targets"]["drivable"]["mask"]).float().mean()
        assert same > 0.97
