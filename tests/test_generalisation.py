"""The DETR-style heads generalise: trained on some scenes, they score on scenes they never saw.

One training run of the tiny four-head model (the demo's input size and lane trunk weight, at test
size) through the real runner on nuScenes-format + BDD100K-format synthetic data, then:

- held-out metrics (devkit mAP, light AP50, BDD100K's lane F-score at 5 px) clear floors well above
  the untrained model (0.000 on each); the CULane-style lane F1 (IoU >= 0.5) is printed: it is still
  0.000 at this budget;
- the swap test: on held-out images, each query head's loss with the right targets is clearly below
  its loss with another image's targets (the class loss of obstacles and lights, the row positions of
  lanes). A head that ignores the image (predicts the dataset's mean) scores the same on both; one
  that reads the image does not.
"""

from __future__ import annotations

import pytest
import torch
from mmengine.config import Config

from perception.build import build_criteria, build_datamodule, build_model
from perception.config import parse_config
from perception.data.camera_dataset import to_model_input
from perception.losses.task_losses import task_losses
from perception.synthetic.bdd100k_writer import Bdd100kSyntheticSpec, write_synthetic_bdd100k
from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes
from tests.conftest import ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict

# 300 steps at the demo's 192x384 input (Swin windows of 6) with the lane head's trunk gradient weighted 2 as
# the demo weighs it (model.trunk_gradient_scale.lanes): on an AMD EPYC the whole test took 253-326 s over four runs
# one evening (289 s in a CI run), against 428 s for the 400 steps at 224x448 it ran until 2026-12-07, which
# held the `make test` tier over its ~15 minutes in slow hours (the run alone 517-699 s there). Held-out after
# 300 steps at seeds 0 / 1 / 2 (config seed; AMD EPYC, 2026-12-07): mAP 0.038 / 0.040 / 0.027, light AP50
# 0.186 / 0.191 / 0.148, lane F-score at 5 px 0.220 / 0.148 / 0.279; swap ratios obstacle_cls 0.681 / 0.716 / 0.706,
# light_cls 0.713 / 0.704 / 0.737, lane_points 0.858 / 0.752 / 0.720 (lane_cls 0.907 / 0.951 / 0.816). The 400-step
# run at 224x448 scored mAP 0.059, light AP50 0.171, lane F-score at 5 px 0.164, swap ratios 0.644 / 0.730 / 0.693
# that hour (seed 0).
# Tried at 300 steps / 192x384 and not taken (seed 0): without the lane weight the lane row-position swap ratio
# was 0.913 (over its bound); with each head's trunk gradient normalised (model.trunk_gradient_norm, the demo's
# run 15) light AP50 fell to 0.047-0.055 (under its floor) while the lane F-score at 5 px rose to 0.25-0.27.
STEPS = 300
INPUT_SIZE = [192, 384]
# Floors where the untrained model scores 0.000 (it keeps no lane; every held-out frame has lanes). The CULane-style
# lane F1 (IoU >= 0.5 of 30-px lines at 1640) is printed, not asserted: at this budget the lane head places lanes
# near the markings of unseen frames (BDD100K's own lane metric, the F-score of marking pixels within 5 px,
# perception.metrics.bdd100k), not yet within the IoU metric's ~3 input px (0.00-0.01 here; 0.64 in `make demo`).
FLOORS = {"nuscenes/mAP": 0.01, "lights/AP50": 0.07, "lanes/F1_pix5_bdd100k": 0.08}
# Held-out loss with the right targets / with another image's targets must stay below these (an image-blind head
# scores ~1.0). The lane class loss is not asserted: every synthetic frame shows the same kinds of lane (the ego
# road's dividers and curbs), so which queries hold a lane of which class hardly depends on the image and the ratio
# sits at 0.8-0.97 by CPU and seed. Where the lanes lie does: the row-position (L1) loss is asserted. The same code
# gives other figures on another CPU (float rounding changes the trajectory), so the bounds keep a margin.
SWAP_RATIOS = {"obstacle_cls": 0.85, "light_cls": 0.8, "lane_points": 0.9}
HEADS = dict(drivable=dict(channels=32, num_classes=2),
             obstacles=dict(dim=64, num_queries=60, num_layers=3, ffn_dim=256, cross_attention="deformable"),
             lanes=dict(dim=64, num_queries=20, num_layers=2, ffn_dim=256),
             lights=dict(dim=64, num_queries=30, num_layers=2, ffn_dim=256, levels=[0, 1, 2],
                         cross_attention="deformable"))
MODEL = dict(TINY_MODEL, backbone=dict(TINY_MODEL["backbone"], window_size=6), heads=HEADS,
             trunk_gradient_scale=dict(lanes=2.0))


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> tuple[str, str]:
    """nuScenes-format: 7 scenes (6 train, 1 held out) x 6 keyframes x 6 cameras; BDD100K-format:
    6 drives (4 train, 2 held out) x 8 frames; 480x270."""
    nuscenes = str(tmp_path_factory.mktemp("generalisation_nuscenes"))
    write_synthetic_nuscenes(nuscenes, SyntheticSpec(scenes=7, samples_per_scene=6, cameras=6, image_size=(480, 270),
                                                     val_scenes=1, seed=11))
    bdd = str(tmp_path_factory.mktemp("generalisation_bdd100k"))
    write_synthetic_bdd100k(bdd, Bdd100kSyntheticSpec(videos=6, frames_per_video=8, val_videos=2,
                                                      image_size=(480, 270), seed=12))
    return nuscenes, bdd


@pytest.mark.slow
def test_query_heads_score_on_held_out_scenes_and_read_the_image(scenes, tmp_path):
    from perception.evaluation.evaluate import evaluate
    from perception.training.runner import train

    nuscenes, bdd = scenes
    config = experiment_dict(
        nuscenes, model=MODEL, input_size=INPUT_SIZE,
        loss_weights=dict(ALL_LOSS_WEIGHTS, drivable_ce=5.0, drivable_dice=5.0),
        bdd100k=dict(data_root=bdd, sample_fraction=0.4), batch_size=8, num_workers=1,
        optimizer=dict(lr=1e-3, weight_decay=0.01, backbone_lr_mult=1.0),
        scheduler=dict(warmup_steps=30, warmup_ratio=0.01, min_lr_ratio=0.02),
        trainer=dict(max_steps=STEPS, max_epochs=-1, accelerator="cpu", devices=1, precision="32-true",
                     gradient_clip_val=1.0, limit_val_batches=0, num_sanity_val_steps=0, log_every_n_steps=10,
                     enable_progress_bar=False, enable_model_summary=False))
    cfg = parse_config(config)
    torch.manual_seed(0)
    untrained_model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    untrained = evaluate(cfg, None, str(tmp_path / "untrained"), predictor=untrained_model,
                         num_workers=0)
    train(Config(config), str(tmp_path / "run"))  # seeded by the runner from the config's seed (default 0)
    checkpoint = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
    trained = evaluate(cfg, checkpoint, str(tmp_path / "trained"), num_workers=0)
    printed = (*FLOORS, "lanes/F1", "lanes/F1_pix2_bdd100k")
    report = ", ".join(f"{k} {trained[k]:.3f} (untrained {untrained[k]:.3f})" for k in printed)
    print(f"held-out after {STEPS} steps: {report}")
    for key, floor in FLOORS.items():
        assert untrained[key] < 0.005, f"untrained {key} {untrained[key]:.3f}: the metric cannot tell learning apart"
        assert trained[key] >= floor, f"held-out {key} {trained[key]:.3f} < {floor} ({report})"

    from perception.inference.predictors import TorchPredictor

    model = TorchPredictor(cfg, checkpoint).model
    ratios = _swap_ratios(cfg, model)
    print("held-out loss, right / swapped targets: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    for name, bound in SWAP_RATIOS.items():
        assert ratios[name] < bound, f"{name}: right / swapped loss {ratios[name]:.3f}: it ignores the image"


@torch.no_grad()
def _swap_ratios(cfg, model) -> dict[str, float]:
    """Per loss, held-out loss with each image's own targets / with another image's targets. nuScenes'
    held-out scene pairs each camera image with the next one (the next camera: other objects); BDD100K's
    two held-out drives pair frame k of one with frame k of the other (the next frame of the same drive
    shows nearly the same lanes and lights). Also the lane class loss, printed only."""
    criteria = build_criteria(cfg)
    datamodule = build_datamodule(cfg)
    nuscenes, bdd = datamodule.dataset("val"), datamodule.bdd100k_dataset("val")
    # (dataset, index shift of the swapped image, the losses read from it)
    groups = [(nuscenes, 1, ("obstacle_cls",)), (bdd, len(bdd) // 2, ("light_cls", "lane_points", "lane_cls"))]
    right, swapped = {}, {}
    for dataset, shift, names in groups:
        items = [dataset[i] for i in range(len(dataset))]
        for start in range(0, len(items), 8):
            indices = range(start, min(start + 8, len(items)))
            batch = datamodule.collate([items[i] for i in indices])
            rolled = datamodule.collate([{**items[i], "image": items[(i + shift) % len(items)]["image"]}
                                         for i in indices])
            for target_batch, sums in ((batch, right), (rolled, swapped)):
                outputs = model(to_model_input(target_batch["images"]))
                scored = {task: c for task, c in criteria.items() if any(name in c.loss_names for name in names)}
                losses = task_losses(scored, outputs, target_batch["targets"], model.heads)
                for name in names:
                    sums[name] = sums.get(name, 0.0) + float(losses[name])
    return {name: right[name] / max(swapped[name], 1e-9) for name in right}
