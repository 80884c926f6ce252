"""Training smoke run, checkpoints, resume rules, evaluation and checkpoint/config mismatch."""

from __future__ import annotations

import json
import os

import pytest
import torch
from mmengine.config import Config

from perception.config import parse_config
from perception.core.checkpoint import CheckpointMismatchError
from perception.evaluation.evaluate import evaluate, write_metrics
from perception.training.runner import resolve_resume, train
from tests.conftest import experiment_dict


@pytest.fixture(scope="module")
def trained(small_dataset, tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp("work"))
    metrics = train(Config(experiment_dict(small_dataset)), work_dir)
    return work_dir, metrics


def test_training_smoke_run_writes_logs_config_and_checkpoints(trained):
    work_dir, metrics = trained
    assert os.path.isfile(os.path.join(work_dir, "config.py"))
    assert os.path.isfile(os.path.join(work_dir, "checkpoints", "last.ckpt"))
    assert os.path.isfile(os.path.join(work_dir, "csv", "metrics.csv"))
    assert os.listdir(os.path.join(work_dir, "tensorboard"))
    assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if k.startswith("train/"))
    checkpoint = torch.load(os.path.join(work_dir, "checkpoints", "last.ckpt"), weights_only=True)
    assert checkpoint["global_step"] == 3
    assert "input_size" in checkpoint["perception_config"]


def test_evaluation_writes_flat_metrics(trained, small_dataset):
    work_dir, _ = trained
    cfg = parse_config(experiment_dict(small_dataset))
    metrics = evaluate(cfg, os.path.join(work_dir, "checkpoints", "last.ckpt"), work_dir, num_workers=0)
    assert 0.0 <= metrics["drivable/IoU"] <= 1.0
    assert metrics["eval/num_images"] == 4 * 6
    path = write_metrics(metrics, work_dir)
    assert json.load(open(path))["drivable/IoU"] == pytest.approx(metrics["drivable/IoU"])


def test_evaluation_on_a_named_device_and_bad_device_names(trained, small_dataset):
    """tools/test.py --device: the model on that device scores as the default does; a name torch does not know,
    or a GPU the machine lacks, is a clear error before anything loads."""
    from perception.commands.test import _device
    from perception.config import ConfigError
    from perception.inference.predictors import TorchPredictor

    work_dir, _ = trained
    cfg = parse_config(experiment_dict(small_dataset))
    checkpoint = os.path.join(work_dir, "checkpoints", "last.ckpt")
    default = evaluate(cfg, checkpoint, os.path.join(work_dir, "eval_default"), num_workers=0)
    on_cpu = evaluate(cfg, None, os.path.join(work_dir, "eval_cpu"), num_workers=0,
                      predictor=TorchPredictor(cfg, checkpoint, device=_device("cpu")))
    assert on_cpu["drivable/IoU"] == pytest.approx(default["drivable/IoU"], abs=1e-6)
    with pytest.raises(ConfigError, match="'gpu' is not a device torch knows"):
        _device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device; use --device cpu"):
            _device("cuda:1")


def test_checkpoint_that_does_not_fit_the_config_is_a_clear_error(trained, small_dataset):
    work_dir, _ = trained
    cfg = parse_config(experiment_dict(small_dataset, model=dict(
        backbone=dict(embed_dim=48, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8]), neck=dict(channels=32),
        heads=dict(drivable=dict(channels=32)))))
    with pytest.raises(CheckpointMismatchError, match="(?s)shape mismatch.*config the checkpoint was trained with"):
        evaluate(cfg, os.path.join(work_dir, "checkpoints", "last.ckpt"), work_dir, num_workers=0)


def test_resume_rules(trained, tmp_path):
    work_dir, _ = trained
    assert resolve_resume(work_dir, True).endswith("last.ckpt")
    assert resolve_resume(work_dir, None) is None
    with pytest.raises(FileNotFoundError, match="refusing to start from scratch"):
        resolve_resume(work_dir, str(tmp_path / "missing.ckpt"))
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        resolve_resume(str(tmp_path), True)
    assert resolve_resume(str(tmp_path), "auto") is None  # first run of a cluster job: fresh start
    assert resolve_resume(work_dir, "auto").endswith("last.ckpt")
    hpc = os.path.join(work_dir, "hpc_ckpt_1.ckpt")  # written by Lightning on SLURM pre-emption
    with open(hpc, "wb") as f:
        f.write(b"x")
    try:
        assert resolve_resume(work_dir, "auto") == hpc
    finally:
        os.remove(hpc)


def test_resume_continues_to_max_steps(trained, small_dataset):
    work_dir, _ = trained
    train(Config(experiment_dict(small_dataset, trainer=dict(
        max_steps=5, max_epochs=-1, accelerator="cpu", devices=1, limit_val_batches=1, num_sanity_val_steps=0,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1))), work_dir, resume=True)
    checkpoint = torch.load(os.path.join(work_dir, "checkpoints", "last.ckpt"), weights_only=True)
    assert checkpoint["global_step"] == 5


def test_atomic_save_keeps_the_previous_checkpoint_on_failure(tmp_path):
    from perception.training.checkpoint_io import CheckpointWriteError, atomic_torch_save

    path = str(tmp_path / "last.ckpt")
    atomic_torch_save({"step": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(CheckpointWriteError, match="RuntimeError: disk full"):
        atomic_torch_save({"step": 2, "bad": Unpicklable()}, path)
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert os.listdir(tmp_path) == ["last.ckpt"]  # no temporary file left behind


def _final_weights(work_dir: str) -> dict:
    checkpoint = torch.load(os.path.join(work_dir, "checkpoints", "last.ckpt"), weights_only=True)
    return checkpoint["global_step"], checkpoint["state_dict"]


def test_resume_mid_epoch_reproduces_the_uninterrupted_run_exactly(small_dataset, tmp_path):
    """15 steps straight == a run that crashes after its step-5 checkpoint, resumed to 15 (one
    loader worker, across an epoch boundary: 48 training images / batch 4 = 12 steps per epoch), the
    weights' moving average (optimizer.ema_decay) included."""
    import lightning as L

    class CrashAfterStep(L.Callback):
        def __init__(self, step: int):
            self.step = step

        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == self.step:
                raise RuntimeError("simulated crash")

    def config() -> Config:
        optimizer = dict(experiment_dict(small_dataset)["optimizer"], ema_decay=0.9)
        trainer = dict(max_steps=15, max_epochs=-1, accelerator="cpu", devices=1, precision="32-true",
                       limit_val_batches=0, num_sanity_val_steps=0, enable_progress_bar=False,
                       enable_model_summary=False, log_every_n_steps=1, deterministic=True)
        return Config(experiment_dict(small_dataset, num_workers=1, checkpoint_every_n_steps=5, optimizer=optimizer,
                                      trainer=trainer))

    train(config(), str(tmp_path / "straight"))
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config(), str(tmp_path / "resumed"), callbacks=[CrashAfterStep(5)])
    step, _ = _final_weights(str(tmp_path / "resumed"))
    assert step == 5
    train(config(), str(tmp_path / "resumed"), resume=True)
    straight_step, straight = _final_weights(str(tmp_path / "straight"))
    resumed_step, resumed = _final_weights(str(tmp_path / "resumed"))
    assert straight_step == resumed_step == 15
    assert straight.keys() == resumed.keys()
    assert any(k.startswith("ema_model.") for k in straight)
    different = [k for k in straight if not torch.equal(straight[k], resumed[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def test_trainer_keys_managed_by_the_runner_are_rejected(small_dataset):
    from perception.config import ConfigError

    with pytest.raises(ConfigError, match="use_distributed_sampler is set by tools/train.py"):
        parse_config(experiment_dict(small_dataset, trainer=dict(use_distributed_sampler=True)))


def test_mixed_four_task_run_trains_validates_and_evaluates(small_dataset, bdd_dataset, tmp_path):
    """The runner on nuScenes + BDD100K with all four heads: mixed training batches, validation
    over both splits (sharded sampler keys), what TensorBoard receives, then every task's metrics
    from tools/test.py's path."""
    from tests.conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL

    overrides = dict(model=dict(TINY_MODEL, heads=ALL_HEADS), loss_weights=ALL_LOSS_WEIGHTS,
                     bdd100k=dict(data_root=bdd_dataset, sample_fraction=0.5))
    trainer = experiment_dict(small_dataset)["trainer"] | dict(limit_val_batches=2, val_check_interval=2, max_steps=4)
    metrics = train(Config(experiment_dict(small_dataset, trainer=trainer, **overrides)), str(tmp_path / "work"))
    assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if k.startswith(("train/", "val/")))
    assert {"train/loss_lane_points", "train/loss_light_cls", "val/drivable_IoU"} <= set(metrics)
    _check_tensorboard(str(tmp_path / "work" / "tensorboard"))
    cfg = parse_config(experiment_dict(small_dataset, **overrides))
    results = evaluate(cfg, str(tmp_path / "work" / "checkpoints" / "last.ckpt"), str(tmp_path / "eval"),
                       num_workers=0)
    for key in ("nuscenes/mAP", "nuscenes/NDS", "drivable/IoU", "drivable/IoU_bdd100k", "lanes/F1",
                "lanes/F1_nuscenes", "lanes/F1_bdd100k", "lights/AP50", "lights/AP50_red"):
        assert key in results, key
    assert results["eval/num_images"] == 24 + 6


def _check_tensorboard(directory: str) -> None:
    """Each validation logs the same drawn frames; validation losses per term; the LR of every parameter group."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(directory, size_guidance={"images": 0})
    events.Reload()
    images = events.Tags()["images"]
    assert len(images) == 4 and all(tag.startswith("val_frames/") for tag in images)  # 2 nuScenes front, 2 BDD
    for tag in images:
        assert [event.step for event in events.Images(tag)] == [2, 4]  # the same frames at each validation
        assert events.Images(tag)[0].width > 448  # original resolution (+ the BEV panel on nuScenes frames)
    scalars = set(events.Tags()["scalars"])
    assert {"val/loss_obstacle_cls", "val/loss_lane_points", "val/loss_drivable_ce", "train/loss_light_cls"} <= scalars
    assert {"lr-AdamW/backbone", "lr-AdamW/backbone_no_decay", "lr-AdamW/heads", "lr-AdamW/heads_no_decay"} <= scalars
