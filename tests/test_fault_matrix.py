"""The fault matrix of issue 15: each fault reproduced as a user meets it, with the outcome we promise."""

from __future__ import annotations

import os
import re
import shutil

import cv2
import numpy as np
import pytest

from perception.data.camera_dataset import ImageReadError
from perception.data.datamodule import NuScenesDataModule
from perception.data.image_io import incomplete_reason, read_image_file


def _truncate(path: str, fraction: float) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * fraction))


def test_end_markers_tell_complete_from_truncated_files(tmp_path):
    image = np.random.default_rng(0).integers(0, 255, (64, 96, 3), np.uint8)
    for suffix in (".jpg", ".png"):
        path = str(tmp_path / f"frame{suffix}")
        cv2.imwrite(path, image)
        data = open(path, "rb").read()
        assert incomplete_reason(data) is None
        assert incomplete_reason(data + b"\x00" * 16) is None  # padding after the end marker is fine
        assert incomplete_reason(data[: len(data) * 3 // 10]) is not None
        assert read_image_file(path).shape == (64, 96, 3)


def test_a_truncated_jpeg_is_skipped_in_training_and_an_error_in_evaluation(small_dataset, tmp_path):
    """Before: OpenCV decoded a JPEG cut to 30 % with grey rows and evaluation scored it silently."""
    root = str(tmp_path / "data")
    shutil.copytree(small_dataset, root, ignore=shutil.ignore_patterns("perception_cache"))
    module = NuScenesDataModule(root, "v1.0-trainval", "synthetic_train", "synthetic_val", ["CAM_FRONT"], (224, 448),
                                batch_size=2, val_batch_size=2, num_workers=0, seed=0)
    train_set, val_set = module.dataset("train"), module.dataset("val")
    train_image = os.path.join(root, train_set.infos[0]["image_path"])
    val_image = os.path.join(root, val_set.infos[0]["image_path"])
    _truncate(train_image, 0.3)
    _truncate(val_image, 0.3)
    assert cv2.imread(val_image) is not None  # what made it silent: the decoder alone accepts it

    item = train_set[(0, 0)]
    assert item["meta"]["skipped_images"] == [train_image]
    with pytest.raises(ImageReadError, match=re.escape(val_image) + ".*truncated JPEG"):
        val_set[0]


def test_a_truncated_bdd_drivable_mask_is_named(bdd_dataset, tmp_path):
    from perception.data.bdd100k import load_bdd100k_infos, read_drivable_mask

    root = str(tmp_path / "bdd")
    shutil.copytree(bdd_dataset, root)
    info = next(i for i in load_bdd100k_infos(root, "val") if i["drivable_mask"])
    _truncate(info["drivable_mask"], 0.5)
    with pytest.raises(ImageReadError, match=re.escape(info["drivable_mask"]) + ".*truncated PNG"):
        read_drivable_mask(info["drivable_mask"])
