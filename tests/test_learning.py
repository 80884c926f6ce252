"""The tiny model learns: it overfits a few synthetic images to a high drivable IoU, and with all four
heads to clearly non-trivial obstacle mAP, light AP50 and lane F1. The trained models are then
exported to ONNX and evaluated with ONNX Runtime: the metrics match the PyTorch model's."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Subset

from perception.config import parse_config
from perception.data.camera_dataset import collate_camera_batch, to_model_input
from perception.data.datamodule import NuScenesDataModule
from perception.metrics.segmentation import BinaryIoU
from perception.tasks import CAMERA_TASKS
from perception.training.assembly import build_system
from tests.conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict

COLLATE = partial(collate_camera_batch, tasks=CAMERA_TASKS)


@pytest.mark.slow
@pytest.mark.overfit
def test_tiny_model_overfits_drivable_area(small_dataset):
    torch.manual_seed(0)
    cfg = parse_config(experiment_dict(
        small_dataset, batch_size=4, optimizer=dict(lr=3e-3, weight_decay=0.0, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=10, warmup_ratio=0.1, min_lr_ratio=0.1),
        trainer=dict(max_steps=160, max_epochs=-1, accelerator="cpu", devices=1, limit_val_batches=0,
                     num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False)))
    datamodule = NuScenesDataModule(cfg.data_root, cfg.version, cfg.train_split, cfg.val_split, list(cfg.cameras),
                                    cfg.input_size, 4, 8, 0, cache_root=None, scale_range=(1.0, 1.0),
                                    flip_prob=0.0, photometric=False, tasks=CAMERA_TASKS)
    train_set = Subset(datamodule.dataset("train"), list(range(0, 48, 6)))  # 8 images, various cameras
    loader = DataLoader(train_set, batch_size=4, shuffle=True, collate_fn=COLLATE)
    system = build_system(cfg)
    untrained = _iou(system, train_set)
    L.Trainer(**cfg.trainer, logger=False).fit(system, train_dataloaders=loader)
    trained = _iou(system, train_set)
    assert untrained < 0.6
    assert trained >= 0.9, f"drivable IoU after overfitting: {trained:.3f} (untrained {untrained:.3f})"


@torch.no_grad()
def _iou(system, dataset) -> float:
    system.eval()
    metric = BinaryIoU()
    batch = COLLATE([dataset[i] for i in range(len(dataset))])
    logits = system(to_model_input(batch["images"]))["drivable.logits"]
    logits = torch.nn.functional.interpolate(logits, size=batch["targets"]["drivable"]["mask"].shape[-2:],
                                             mode="bilinear")
    metric.update(logits.argmax(1) == 1, batch["targets"]["drivable"]["mask"])
    system.train()
    return metric.compute()["IoU"]

OBSTACLE_STEPS = 500
OBSTACLE_MAP_FLOOR = 0.15  # measured 0.249 (NDS 0.333) after 500 steps; untrained 0.000
LANE_LIGHT_STEPS = 300
LANE_LIGHT_HEADS = dict(drivable=ALL_HEADS["drivable"], lanes=ALL_HEADS["lanes"], lights=ALL_HEADS["lights"])
# Measured after 300 steps: lanes F1 0.595, lights AP50 0.639, drivable IoU 0.979; untrained 0.000, 0.000, 0.314.
LANE_LIGHT_FLOORS = {"lanes/F1_bdd100k": 0.3, "lights/AP50": 0.2, "drivable/IoU_bdd100k": 0.85}


@pytest.mark.slow
@pytest.mark.overfit
def test_tiny_model_overfits_lanes_and_lights(small_dataset, bdd_dataset, tmp_path):
    """Overfit the 6 BDD100K-format validation frames with the lane, light and drivable heads, then
    score them with the lane F1 and pycocotools. nuScenes images would add drivable labels only."""
    from perception.build import build_datamodule
    from perception.evaluation.evaluate import evaluate

    torch.manual_seed(0)
    cfg = parse_config(experiment_dict(
        small_dataset, model=dict(TINY_MODEL, heads=LANE_LIGHT_HEADS), loss_weights=ALL_LOSS_WEIGHTS,
        bdd100k=dict(data_root=bdd_dataset),
        optimizer=dict(lr=1e-3, weight_decay=0.0, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=20, warmup_ratio=0.1, min_lr_ratio=0.1),
        trainer=dict(max_steps=LANE_LIGHT_STEPS, max_epochs=-1, accelerator="cpu", devices=1, limit_val_batches=0,
                     num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, gradient_clip_val=1.0)))
    train_set = build_datamodule(cfg).bdd100k_dataset("val")  # the evaluation transform: the scored images
    loader = DataLoader(train_set, batch_size=3, shuffle=True, collate_fn=COLLATE)
    system = build_system(cfg)
    untrained = evaluate(cfg, None, str(tmp_path / "before"), predictor=system.model.eval(), num_workers=0)
    L.Trainer(**cfg.trainer, logger=False).fit(system.train(), train_dataloaders=loader)
    trained = evaluate(cfg, None, str(tmp_path / "after"), predictor=system.model.eval(), num_workers=0)
    print("lanes and lights: " + ", ".join(f"{k} {trained[k]:.3f} (untrained {untrained[k]:.3f})"
                                           for k in LANE_LIGHT_FLOORS))
    for key, floor in LANE_LIGHT_FLOORS.items():
        assert trained[key] >= floor, f"{key} after overfitting {trained[key]:.3f} < {floor}"
    for key in ("lights/AP50", "lanes/F1_bdd100k"):
        assert untrained[key] < 0.05, f"untrained {key} {untrained[key]}: the metric cannot tell learning apart"
    exported = _evaluate_exported(system.model, cfg, tmp_path)
    for key in LANE_LIGHT_FLOORS:
        assert exported[key] == pytest.approx(trained[key], abs=0.005), f"{key}: ONNX Runtime vs PyTorch"


OBSTACLE_MODEL = dict(
    backbone=dict(name="swin_tiny_patch4_window7_224", embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8],
                  drop_path_rate=0.0),
    neck=dict(channels=32),
    heads=dict(drivable=None, obstacles=dict(dim=64, num_queries=60, num_layers=3, num_heads=4, ffn_dim=256)),
)


@pytest.mark.slow
@pytest.mark.overfit
def test_tiny_model_overfits_obstacles_to_a_nontrivial_nuscenes_map(small_dataset, tmp_path):
    """Overfit the 24 camera images of the validation scene, then score them with the devkit."""
    from perception.evaluation.evaluate import evaluate

    torch.manual_seed(0)
    cfg = parse_config(experiment_dict(
        small_dataset, model=OBSTACLE_MODEL, loss_weights=dict(
            obstacle_cls=2.0, obstacle_l1=5.0, obstacle_giou=2.0, obstacle_center=5.0, obstacle_depth=1.0,
            obstacle_size=1.0, obstacle_yaw=1.0, obstacle_velocity=0.2, obstacle_attribute=0.5),
        optimizer=dict(lr=1e-3, weight_decay=0.0, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=20, warmup_ratio=0.1, min_lr_ratio=0.1),
        trainer=dict(max_steps=OBSTACLE_STEPS, max_epochs=-1, accelerator="cpu", devices=1, limit_val_batches=0,
                     num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, gradient_clip_val=1.0)))
    datamodule = NuScenesDataModule(cfg.data_root, cfg.version, cfg.train_split, cfg.val_split, list(cfg.cameras),
                                    cfg.input_size, 4, 8, 0, tasks=CAMERA_TASKS)
    train_set = datamodule.dataset("val")  # the evaluation transform: the images that will be scored
    loader = DataLoader(train_set, batch_size=4, shuffle=True, collate_fn=COLLATE)
    system = build_system(cfg)
    untrained = evaluate(cfg, None, str(tmp_path / "before"), predictor=system.model.eval(), num_workers=0)
    L.Trainer(**cfg.trainer, logger=False).fit(system.train(), train_dataloaders=loader)
    trained = evaluate(cfg, None, str(tmp_path / "after"), predictor=system.model.eval(), num_workers=0)
    print(f"obstacle overfit: mAP {trained['nuscenes/mAP']:.3f} NDS {trained['nuscenes/NDS']:.3f} "
          f"mATE {trained['nuscenes/mATE']:.3f} AP_car {trained['nuscenes/AP_car']:.3f} "
          f"(untrained mAP {untrained['nuscenes/mAP']:.3f} NDS {untrained['nuscenes/NDS']:.3f})")
    assert untrained["nuscenes/mAP"] < 0.02
    assert trained["nuscenes/mAP"] >= OBSTACLE_MAP_FLOOR, (
        f"nuScenes mAP after overfitting {trained['nuscenes/mAP']:.3f} (untrained {untrained['nuscenes/mAP']:.3f})")
    exported = _evaluate_exported(system.model, cfg, tmp_path)
    for key in ("nuscenes/mAP", "nuscenes/NDS", "nuscenes/mATE"):
        assert exported[key] == pytest.approx(trained[key], abs=0.005), f"{key}: ONNX Runtime vs PyTorch"


def _evaluate_exported(model, cfg, tmp_path) -> dict:
    """Export the trained model (fixed batch 4, all checks) and evaluate it with ONNX Runtime."""
    from perception.evaluation.evaluate import evaluate
    from perception.export.camera_onnx import export_camera_model
    from perception.inference.predictors import OnnxPredictor

    path = str(tmp_path / "trained.onnx")
    export_camera_model(model, tuple(cfg.input_size), path, batch=4, fp16_images=4)
    return evaluate(cfg, None, str(tmp_path / "onnx"), predictor=OnnxPredictor(path), num_workers=0)
