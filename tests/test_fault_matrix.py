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


def test_non_finite_outputs_of_a_detr_head_skip_the_step_instead_of_crashing_the_matcher(small_dataset, tmp_path):
    """Before: optimizer.lr=1e6 died at step 1 inside scipy's Hungarian solver ("matrix contains
    invalid numeric entries"); now the guard skips steps within the budget, then stops naming the losses."""
    from mmengine.config import Config

    from perception.training.runner import train
    from tests.conftest import ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict

    heads = dict(drivable=dict(channels=32, num_classes=2), obstacles=dict(dim=32, num_queries=20, ffn_dim=64),
                 lanes=dict(dim=32, num_queries=10, ffn_dim=64))
    weights = {k: v for k, v in ALL_LOSS_WEIGHTS.items() if not k.startswith("light")}
    cfg = experiment_dict(small_dataset, model=dict(TINY_MODEL, heads=heads), loss_weights=weights,
                          optimizer=dict(lr=1e6, weight_decay=0.0, backbone_lr_mult=1.0),
                          scheduler=dict(warmup_steps=0), faults=dict(max_nonfinite_steps=1))
    cfg["trainer"] |= dict(max_steps=6, limit_val_batches=0)
    with pytest.raises(FloatingPointError, match=r"(?s)obstacle_cls=nan.*lane_cls=nan.*max_nonfinite_steps=1"):
        train(Config(cfg), str(tmp_path / "work"))


@pytest.mark.parametrize("task", ["obstacles", "lanes", "lights"])
def test_set_criteria_return_nan_losses_for_non_finite_outputs(task):
    import torch

    from perception.build import build_criteria, build_model
    from perception.config import parse_config
    from tests.conftest import ALL_HEADS, TINY_MODEL, experiment_dict

    cfg = parse_config(experiment_dict("unused", model=dict(TINY_MODEL, heads={task: ALL_HEADS[task]}),
                                       bdd100k=dict(data_root="unused")))
    model = build_model(cfg.model, tuple(cfg.input_size)).train()
    outputs = model(torch.zeros(1, 3, *cfg.input_size))
    outputs[f"{task}.aux0.logits"] = outputs[f"{task}.aux0.logits"] * float("nan")
    targets = {task: {"valid": torch.ones(1, dtype=torch.bool), "per_image": [None], "input_size": cfg.input_size}}
    losses = build_criteria(cfg)[task](outputs, targets)  # never reaches matching
    assert losses and all(torch.isnan(v) for v in losses.values())
