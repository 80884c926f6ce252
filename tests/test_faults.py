"""Faults and bad input: non-finite losses, unreadable images, broken tables, each with a clear outcome."""

from __future__ import annotations

import os
import re
import shutil

import lightning as L
import pytest
import torch

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.data.camera_dataset import ImageReadError, collate_camera_batch
from perception.data.tables import DatasetError, load_nuscenes
from perception.models.trajectory_transformer import TrajectoryTransformer
from perception.tasks import CAMERA_TASKS
from perception.training.faults import FaultTracker
from perception.training.motion_system import MotionSystem
from tests.conftest import front_camera_copy


class _PoisonedForecaster(TrajectoryTransformer):
    """Returns NaN trajectories on the given training calls (counted from 0)."""

    def __init__(self, poisoned_calls: set[int]):
        super().__init__(dim=16, num_heads=2, ffn_dim=32, num_modes=2)
        self.poisoned_calls, self.calls = poisoned_calls, 0

    def forward(self, *args):
        trajectories, logits = super().forward(*args)
        if self.training and args[-1].dim() == 3:  # the teacher-forced pass, once per step
            poisoned = self.calls in self.poisoned_calls
            self.calls += 1
            if poisoned:
                trajectories = trajectories * float("nan")
        return trajectories, logits


def _agents(n: int = 64) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"history": torch.randn(4, 2, generator=g), "history_valid": torch.ones(4),
             "lanes": torch.randn(32, 10, 4, generator=g), "lanes_valid": torch.ones(32),
             "future": torch.cumsum(torch.ones(12, 2), 0), "future_valid": torch.ones(12)} for _ in range(n)]


def _fit(model, max_nonfinite_steps: int, max_steps: int = 6) -> tuple[L.Trainer, MotionSystem]:
    system = MotionSystem(model, {"motion_reg_self_fed": 0.0}, OptimizerConfig(lr=1e-3),
                          SchedulerConfig(warmup_steps=0), faults=FaultsConfig(max_nonfinite_steps=max_nonfinite_steps))
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(system, torch.utils.data.DataLoader(_agents(), batch_size=8))
    return trainer, system


def test_non_finite_losses_are_skipped_within_the_budget():
    torch.manual_seed(0)
    trainer, system = _fit(_PoisonedForecaster({1, 3}), max_nonfinite_steps=2)
    assert system.faults.nonfinite_steps == 2
    assert trainer.global_step == 6  # six real optimizer steps; the two poisoned batches took none
    assert all(torch.isfinite(p).all() for p in system.model.parameters())


def test_non_finite_losses_beyond_the_budget_stop_the_run_with_the_per_task_losses():
    torch.manual_seed(0)
    with pytest.raises(FloatingPointError, match=r"(?s)motion_reg=nan.*faults.max_nonfinite_steps=1"):
        _fit(_PoisonedForecaster({0, 2}), max_nonfinite_steps=1)


def test_unreadable_training_images_are_replaced_and_counted_but_fail_evaluation(small_dataset, tmp_path):
    root, module = front_camera_copy(small_dataset, tmp_path)
    train_set, val_set = module.dataset("train"), module.dataset("val")
    truncated = os.path.join(root, train_set.infos[0]["image_path"])
    with open(truncated, "r+b") as f:
        f.truncate(200)  # a JPEG cut short mid-header
    os.remove(os.path.join(root, train_set.infos[1]["image_path"]))

    item = train_set[(0, 0)]  # both bad images are skipped, item 2 stands in
    assert item["meta"]["skipped_images"] == [truncated, os.path.join(root, train_set.infos[1]["image_path"])]
    assert item["meta"]["sample_data_token"] == train_set.infos[2]["sample_data_token"]
    batch = collate_camera_batch([item, train_set[(0, 3)]], CAMERA_TASKS)
    assert batch["skipped_images"] == item["meta"]["skipped_images"]

    tracker = FaultTracker(max_nonfinite_steps=0, max_bad_images=2)
    tracker.count_bad_images(item["meta"]["skipped_images"])
    with pytest.raises(RuntimeError, match="faults.max_bad_images=2"):
        tracker.count_bad_images(["one more"])

    val_image = os.path.join(root, val_set.infos[0]["image_path"])
    with open(val_image, "wb") as f:
        f.write(b"not a jpeg")
    with pytest.raises(ImageReadError, match=re.escape(f"{val_image} could not be decoded")):
        val_set[0]


@pytest.mark.parametrize("table, damage, message", [
    ("sample", "delete", r"sample\.json is missing"),
    ("ego_pose", "truncate", r"ego_pose\.json is not valid JSON"),
])
def test_missing_or_broken_tables_are_named(small_dataset, tmp_path, table, damage, message):
    root = tmp_path / "data"
    shutil.copytree(os.path.join(small_dataset, "v1.0-trainval"), root / "v1.0-trainval")
    path = root / "v1.0-trainval" / f"{table}.json"
    if damage == "delete":
        path.unlink()
    else:
        path.write_text(path.read_text()[:500])
    with pytest.raises(DatasetError, match=message):
        load_nuscenes(str(root), "v1.0-trainval")


def test_tools_report_a_broken_table_and_exit_2(small_dataset, tmp_path):
    import subprocess
    import sys

    root = tmp_path / "data"
    shutil.copytree(os.path.join(small_dataset, "v1.0-trainval"), root / "v1.0-trainval")
    (root / "v1.0-trainval" / "scene.json").write_text("[{")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "tools/build_label_cache.py", "configs/demo_synthetic.py",
                             "--cfg-options", f"data_root={root}"], cwd=repo, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and "scene.json is not valid JSON" in result.stderr
