"""The tiny model learns: it overfits a few synthetic images to a high drivable IoU, and with all four
heads to clearly non-trivial obstacle mAP, light AP50 and lane F1."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader, Subset

from perception.build import build_system
from perception.config import parse_config
from perception.data.camera_dataset import collate_camera_batch
from perception.data.datamodule import NuScenesDataModule
from perception.metrics.segmentation import BinaryIoU
from tests.conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict


@pytest.mark.slow
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
                                    flip_prob=0.0, photometric=False)
    train_set = Subset(datamodule.dataset("train"), list(range(0, 48, 6)))  # 8 images, various cameras
    loader = DataLoader(train_set, batch_size=4, shuffle=True, collate_fn=collate_camera_batch)
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
    batch = collate_camera_batch([dataset[i] for i in range(len(dataset))])
    logits = system(batch["images"])["drivable.logits"]
    logits = torch.nn.functional.interpolate(logits, size=batch["targets"]["drivable"]["mask"].shape[-2:],
                                             mode="bilinear")
    metric.update(logits.argmax(1) == 1, batch["targets"]["drivable"]["mask"])
    system.train()
    return metric.compute()["IoU"]


ALL_HEADS_STEPS = 500
# Measured after 500 steps (seed 0); untrained: mAP 0.00, AP50 0.00, F1 0.00.
FLOORS = {"nuscenes/mAP": 0.03, "lights/AP50": 0.05, "lanes/F1_bdd100k": 0.15, "drivable/IoU": 0.85}


@pytest.mark.slow
def test_tiny_model_learns_all_four_heads_from_mixed_partial_labels(small_dataset, bdd_dataset, tmp_path):
    """Overfit the validation images of both datasets (24 nuScenes cameras, 6 BDD100K frames) with
    all four heads, each task learning only from the images that carry its labels, then score them
    with the devkit (obstacles), pycocotools (lights) and the lane F1. Lanes come from BDD100K here
    (``lane_cameras=[]``): the nuScenes front/back lanes need a longer schedule than a test affords."""
    from perception.build import build_datamodule
    from perception.evaluation.evaluate import evaluate

    torch.manual_seed(0)
    cfg = parse_config(experiment_dict(
        small_dataset, model=dict(TINY_MODEL, heads=ALL_HEADS), loss_weights=ALL_LOSS_WEIGHTS,
        bdd100k=dict(data_root=bdd_dataset), lane_cameras=[],
        optimizer=dict(lr=1e-3, weight_decay=0.0, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=20, warmup_ratio=0.1, min_lr_ratio=0.1),
        trainer=dict(max_steps=ALL_HEADS_STEPS, max_epochs=-1, accelerator="cpu", devices=1, limit_val_batches=0,
                     num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, gradient_clip_val=1.0)))
    datamodule = build_datamodule(cfg)
    # The evaluation transform: the images that will be scored.
    train_set = ConcatDataset([datamodule.dataset("val"), datamodule.bdd100k_dataset("val")])
    loader = DataLoader(train_set, batch_size=4, shuffle=True, collate_fn=collate_camera_batch)
    system = build_system(cfg)
    untrained = evaluate(cfg, None, str(tmp_path / "before"), predictor=system.model.eval(), num_workers=0)
    L.Trainer(**cfg.trainer, logger=False).fit(system.train(), train_dataloaders=loader)
    trained = evaluate(cfg, None, str(tmp_path / "after"), predictor=system.model.eval(), num_workers=0)
    print("four heads: " + ", ".join(f"{k} {trained[k]:.3f} (untrained {untrained[k]:.3f})" for k in FLOORS))
    for key, floor in FLOORS.items():
        assert trained[key] >= floor, f"{key} after overfitting {trained[key]:.3f} < {floor}"
    for key in ("nuscenes/mAP", "lights/AP50", "lanes/F1_bdd100k"):
        assert untrained[key] < 0.05, f"untrained {key} {untrained[key]}: the metric cannot tell learning apart"
