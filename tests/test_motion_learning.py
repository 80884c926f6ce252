"""The forecaster learns: it overfits a few agents, and trained through the tools it beats the
devkit's constant-velocity baseline on the synthetic validation split (devkit metrics)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import motion_experiment_dict

from perception.data.motion_datamodule import MotionDataset
from perception.data.motion_samples import MotionDataSettings, extract_motion_samples, motion_tokens_of_split
from perception.losses.motion_loss import MotionCriterion
from perception.metrics.trajectory import TrajectoryMetrics
from perception.models.trajectory_transformer import TrajectoryTransformer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.overfit
def test_overfits_a_few_agents_to_a_low_min_ade(motion_dataset):
    from nuscenes.nuscenes import NuScenes

    torch.manual_seed(0)
    nusc = NuScenes("v1.0-trainval", motion_dataset, verbose=False)
    tokens = motion_tokens_of_split(motion_dataset, "v1.0-trainval", "synthetic_train")[::40][:16]
    arrays = extract_motion_samples(nusc, tokens, MotionDataSettings())
    arrays["tokens"] = tokens
    batch = {k: v for k, v in torch.utils.data.default_collate([MotionDataset(arrays)[i]
                                                                for i in range(len(tokens))]).items()}
    inputs = (batch["history"], batch["history_valid"], batch["lanes"], batch["lanes_valid"])
    model = TrajectoryTransformer(dim=64, num_heads=4, ffn_dim=128, num_modes=3)
    criterion = MotionCriterion()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=500, eta_min=1e-4)

    def min_ade() -> float:
        model.eval()
        with torch.no_grad():
            trajectories, probabilities = model.forecast(*inputs)
        model.train()
        metrics = TrajectoryMetrics(k=5)
        metrics.update(trajectories.numpy(), probabilities.numpy(), batch["future"].numpy())
        return metrics.compute()["minADE_5"]

    before = min_ade()
    for _ in range(500):
        losses = criterion(model, inputs, batch["future"], batch["future_valid"])
        optimizer.zero_grad()
        sum(losses.values()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    after = min_ade()
    print(f"overfit {len(tokens)} agents: minADE_5 {before:.2f} m -> {after:.3f} m")
    assert before > 5.0
    # Measured 0.064-0.076 m over seeds 0-2 (AVX2 CPU). Before the mode head read its features
    # without a gradient, 0.27-1.16 m depending on seed and CPU: the test failed on one.
    assert after < 0.25


@pytest.mark.extended  # 88 s: the forecaster's held-out test
def test_trained_forecaster_beats_constant_velocity_with_devkit_metrics(motion_dataset, tmp_path):
    config = tmp_path / "motion.py"
    cfg = motion_experiment_dict(motion_dataset, cache_root=str(tmp_path / "cache"),
                                 model=dict(dim=64, num_heads=4, ffn_dim=128, num_modes=5),
                                 optimizer=dict(lr=1e-3, weight_decay=0.01),
                                 scheduler=dict(warmup_steps=50, warmup_ratio=0.01, min_lr_ratio=0.05))
    cfg["trainer"].update(max_steps=400, limit_val_batches=None, val_check_interval=None,
                          check_val_every_n_epoch=1000, log_every_n_steps=50, gradient_clip_val=1.0)
    config.write_text("\n".join(f"{k} = {v!r}" for k, v in cfg.items()) + "\n")
    work = tmp_path / "work"
    env = dict(os.environ, PYTHONPATH=REPO)
    train = subprocess.run([sys.executable, "tools/train.py", str(config), "--work-dir", str(work)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=900)
    assert train.returncode == 0, train.stderr[-3000:]
    test = subprocess.run([sys.executable, "tools/test.py", str(config), str(work / "checkpoints" / "last.ckpt"),
                           "--work-dir", str(work)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert test.returncode == 0, test.stderr[-3000:]
    metrics = json.loads((work / "metrics.json").read_text())
    print({k: round(v, 3) for k, v in metrics.items()})
    assert os.path.isfile(work / "results_motion_synthetic_val.json")
    for name in ("minADE_5", "minFDE_5", "MissRate_2_5"):
        assert metrics[f"motion/{name}"] < metrics[f"motion_cv/{name}"], name
    assert metrics["motion/minADE_5"] < 0.6 * metrics["motion_cv/minADE_5"]  # measured 0.32 (1.60 vs 4.96 m)
