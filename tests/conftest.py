"""Shared fixtures: small synthetic nuScenes-format datasets written once per test session."""

from __future__ import annotations

import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

from perception.synthetic.bdd100k_writer import Bdd100kSyntheticSpec, write_synthetic_bdd100k  # noqa: E402
from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes  # noqa: E402

TINY_MODEL = dict(
    backbone=dict(name="swin_tiny_patch4_window7_224", embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8],
                  drop_path_rate=0.0),
    neck=dict(channels=32),
    heads=dict(drivable=dict(channels=32, num_classes=2)),
)


@pytest.fixture(scope="session")
def small_spec() -> SyntheticSpec:
    return SyntheticSpec(scenes=3, samples_per_scene=4, cameras=6, image_size=(480, 270), val_scenes=1, seed=3)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory, small_spec) -> str:
    """3 scenes x 4 keyframes x 6 cameras at 480x270, splits synthetic_train / synthetic_val."""
    root = str(tmp_path_factory.mktemp("synthetic_nuscenes"))
    write_synthetic_nuscenes(root, small_spec)
    return root


@pytest.fixture(scope="session")
def bdd_dataset(tmp_path_factory) -> str:
    """Synthetic BDD100K layout: 4 drives x 6 front-camera frames at 480x270, splits train (3 drives) / val."""
    root = str(tmp_path_factory.mktemp("synthetic_bdd100k"))
    write_synthetic_bdd100k(root, Bdd100kSyntheticSpec(videos=4, frames_per_video=6, val_videos=1,
                                                       image_size=(480, 270), seed=4))
    return root


ALL_HEADS = dict(drivable=dict(channels=32, num_classes=2), obstacles=dict(dim=64, num_queries=60, ffn_dim=256),
                 lanes=dict(dim=64, num_queries=20), lights=dict(dim=64, num_queries=30))
ALL_LOSS_WEIGHTS = dict(
    drivable_ce=1.0, drivable_dice=1.0, obstacle_cls=2.0, obstacle_l1=5.0, obstacle_giou=2.0, obstacle_center=5.0,
    obstacle_depth=1.0, obstacle_size=1.0, obstacle_yaw=1.0, obstacle_velocity=0.2, obstacle_attribute=0.5,
    lane_cls=2.0, lane_points=5.0, lane_visibility=1.0, lane_mask=1.0, light_cls=2.0, light_l1=5.0, light_giou=2.0)


def experiment_dict(data_root: str, **overrides) -> dict:
    """A plain config dict for the tiny model on a synthetic dataset."""
    cfg = dict(
        data_root=data_root, version="v1.0-trainval", train_split="synthetic_train", val_split="synthetic_val",
        input_size=[224, 448], batch_size=4, val_batch_size=8, num_workers=0, model=TINY_MODEL,
        optimizer=dict(lr=2e-3, weight_decay=0.01, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=5, warmup_ratio=0.1, min_lr_ratio=0.05),
        trainer=dict(max_steps=3, max_epochs=-1, accelerator="cpu", devices=1, precision="32-true",
                     log_every_n_steps=1, limit_val_batches=1, num_sanity_val_steps=0, enable_progress_bar=False,
                     enable_model_summary=False),
    )
    cfg.update(overrides)
    return cfg


@pytest.fixture(scope="session")
def motion_dataset(tmp_path_factory) -> str:
    """5 scenes x 30 keyframes (15 s), no camera images; prediction agents in maps/prediction."""
    root = str(tmp_path_factory.mktemp("synthetic_motion"))
    write_synthetic_nuscenes(root, SyntheticSpec(scenes=5, samples_per_scene=30, cameras=0, val_scenes=1, seed=5))
    return root


def motion_experiment_dict(data_root: str, **overrides) -> dict:
    cfg = dict(
        task="motion", data_root=data_root, version="v1.0-trainval", train_split="synthetic_train",
        val_split="synthetic_val", model=dict(dim=32, num_heads=4, ffn_dim=64, num_modes=3),
        batch_size=32, val_batch_size=128,
        optimizer=dict(lr=2e-3, weight_decay=0.01), scheduler=dict(warmup_steps=10, warmup_ratio=0.1),
        trainer=dict(max_steps=3, max_epochs=-1, accelerator="cpu", devices=1, precision="32-true",
                     log_every_n_steps=1, limit_val_batches=1, num_sanity_val_steps=0, enable_progress_bar=False,
                     enable_model_summary=False),
    )
    cfg.update(overrides)
    return cfg


def front_camera_copy(small_dataset: str, tmp_path) -> tuple[str, object]:
    """(root, datamodule): a private copy of the small dataset (no label cache) to damage, with a
    front-camera datamodule over it."""
    import shutil

    from perception.data.datamodule import NuScenesDataModule
    from perception.tasks import CAMERA_TASKS

    root = str(tmp_path / "data")
    shutil.copytree(small_dataset, root, ignore=shutil.ignore_patterns("perception_cache"))
    return root, NuScenesDataModule(root, "v1.0-trainval", "synthetic_train", "synthetic_val", ["CAM_FRONT"],
                                    (224, 448), batch_size=2, val_batch_size=2, num_workers=0, seed=0,
                                    tasks=CAMERA_TASKS)
