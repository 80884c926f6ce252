"""Drivable IoU by hand, and the post-processor inverting the evaluation transform."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.data.transforms import CameraTransform
from perception.losses.drivable_loss import DrivableCriterion
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import to_original_image


def test_binary_iou_by_hand_with_ignore():
    prediction = np.array([[1, 1, 0, 0], [1, 0, 1, 0]])
    target = np.array([[1, 0, 0, 255], [1, 1, 255, 0]])
    metric = BinaryIoU()
    metric.update(prediction, target)
    # known pixels: tp=2 (0,0),(1,0); fp=1 (0,1); fn=1 (1,1); the prediction at (1,2) is ignored
    assert metric.compute()["IoU"] == pytest.approx(2 / 4)
    metric.update(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.long))
    assert metric.compute()["IoU"] == pytest.approx(6 / 8)


def test_postprocess_maps_input_masks_back_to_the_original_image():
    rng = np.random.default_rng(0)
    original = np.zeros((900, 1600), np.uint8)
    original[520:, 200:1300] = 1
    original[600:700, 1400:1500] = 1
    transform = CameraTransform((224, 448), train=False)
    out = transform(np.zeros((900, 1600, 3), np.uint8), original, np.zeros((0, 4)), np.zeros((0, 2)),
                    np.eye(3))
    restored = to_original_image(out["mask"].astype(np.float32), out["affine"], (1600, 900))
    visible = np.zeros_like(original, bool)
    visible[int(out["params"].crop_y / out["params"].scale) + 4:] = True  # rows the network saw
    agreement = (restored == original)[visible].mean()
    assert agreement > 0.995
    assert restored[: int(out["params"].crop_y / out["params"].scale) - 4].max() == 0  # cropped sky: not drivable
    del rng


def test_criterion_skips_samples_without_drivable_labels():
    logits = torch.randn(3, 2, 8, 8, requires_grad=True)
    mask = torch.randint(0, 2, (3, 32, 32))
    criterion = DrivableCriterion()
    labelled_only = criterion({"drivable.logits": logits[:1]},
                              {"drivable": {"valid": torch.tensor([True]), "mask": mask[:1]}})
    mixed = criterion({"drivable.logits": logits}, {"drivable": {"valid": torch.tensor([True, False, False]),
                                                                 "mask": mask}})
    assert torch.allclose(labelled_only["drivable_ce"], mixed["drivable_ce"])
    mixed["drivable_ce"].backward()
    assert logits.grad[1:].abs().sum() == 0  # unlabelled samples get no gradient
    none = criterion({"drivable.logits": logits}, {"drivable": {"valid": torch.zeros(3, dtype=torch.bool),
                                                                "mask": mask}})
    assert none["drivable_ce"].item() == 0.0 and none["drivable_ce"].requires_grad
