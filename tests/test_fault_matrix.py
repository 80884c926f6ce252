"""The fault matrix of issue 15: each fault reproduced as a user meets it, with the outcome we promise."""

from __future__ import annotations

import os
import re
import shutil

import cv2
import numpy as np
import pytest

from perception.data.camera_dataset import ImageReadError
from perception.data.image_io import incomplete_reason, read_image_file
from tests.conftest import front_camera_copy


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
    root, module = front_camera_copy(small_dataset, tmp_path)
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


def _short_run(data_root: str, max_steps: int, **overrides):
    from mmengine.config import Config

    from tests.conftest import experiment_dict

    return Config(experiment_dict(data_root, num_workers=1, trainer=dict(
        max_steps=max_steps, max_epochs=-1, accelerator="cpu", devices=1, precision="32-true", limit_val_batches=0,
        num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
        deterministic=True), **overrides))


def _saved(work_dir: str):
    import torch

    checkpoint = torch.load(os.path.join(work_dir, "checkpoints", "last.ckpt"), weights_only=True)
    return checkpoint["global_step"], checkpoint["state_dict"]


def test_sigterm_saves_a_resumable_checkpoint_and_exits_143(small_dataset, tmp_path):
    """Before: SIGTERM (preemption, time limits) exited 0 and saved nothing; the work was lost."""
    import signal

    import lightning as L
    import torch

    from perception.training.preemption import TrainingPreempted
    from perception.training.runner import train

    class SigtermAtStep(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 4:
                os.kill(os.getpid(), signal.SIGTERM)  # what `scancel` / a pod eviction sends

    train(_short_run(small_dataset, 8), str(tmp_path / "straight"))
    with pytest.raises(TrainingPreempted) as stop:
        train(_short_run(small_dataset, 8), str(tmp_path / "preempted"), callbacks=[SigtermAtStep()])
    assert stop.value.code == 143 and "--resume auto" in str(stop.value)
    assert _saved(str(tmp_path / "preempted"))[0] == 4
    train(_short_run(small_dataset, 8), str(tmp_path / "preempted"), resume="auto")
    (straight_step, straight), (resumed_step, resumed) = _saved(str(tmp_path / "straight")), \
        _saved(str(tmp_path / "preempted"))
    assert straight_step == resumed_step == 8
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_a_corrupt_validation_image_is_skipped_and_counted_during_training(small_dataset, tmp_path):
    """Before: the first validation raised ImageReadError and the run died with nothing saved."""
    from perception.training.runner import train

    root, module = front_camera_copy(small_dataset, tmp_path)
    with open(os.path.join(root, module.dataset("val").infos[0]["image_path"]), "wb") as f:
        f.write(b"\xff\xd8 not really a jpeg")
    cfg = _short_run(root, 2, cameras=["CAM_FRONT"])
    cfg.trainer.limit_val_batches = 1
    cfg.val_batch_size = 2
    metrics = train(cfg, str(tmp_path / "work"))
    assert metrics["val/skipped_images"] == 1.0
    assert os.path.isfile(os.path.join(tmp_path, "work", "checkpoints", "last.ckpt"))


def test_a_checkpoint_is_kept_every_few_minutes_by_default(small_dataset, tmp_path):
    from perception.config import parse_config
    from tests.conftest import experiment_dict

    assert 0 < parse_config(experiment_dict(small_dataset)).checkpoint_every_n_minutes <= 15


def test_resuming_from_a_checkpoint_of_another_model_names_the_tensors(small_dataset, tmp_path):
    """Before: a raw torch RuntimeError from load_state_dict deep inside Lightning."""
    from perception.core.checkpoint import CheckpointMismatchError
    from perception.training.runner import train
    from tests.conftest import TINY_MODEL

    train(_short_run(small_dataset, 1), str(tmp_path / "work"))
    wider = dict(TINY_MODEL, heads=dict(drivable=dict(channels=48, num_classes=2)))
    with pytest.raises(CheckpointMismatchError, match=r"(?s)does not fit.*shape mismatch.*drivable"):
        train(_short_run(small_dataset, 2, model=wider), str(tmp_path / "work"), resume=True)


@pytest.mark.parametrize("value", [-5, 0, "abc", 2.5])
def test_impossible_step_budgets_are_config_errors(small_dataset, value):
    """Before: -5 / "abc" gave Lightning tracebacks after the config dump; 0 exited 0 with empty metrics."""
    from perception.config import ConfigError, parse_config
    from tests.conftest import experiment_dict

    cfg = experiment_dict(small_dataset)
    cfg["trainer"]["max_steps"] = value
    with pytest.raises(ConfigError, match="trainer.max_steps must be a whole number"):
        parse_config(cfg)


def test_a_full_disk_at_save_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """Before: "enforce fail at inline_container.cc" with the Errno 28 buried. /dev/full fails every
    write with ENOSPC, as a full disk does."""
    import torch

    from perception.training import checkpoint_io

    path = str(tmp_path / "last.ckpt")
    checkpoint_io.atomic_torch_save({"step": 1}, path)

    def full_disk(handle, mode):
        os.close(handle)
        return open("/dev/full", mode)

    monkeypatch.setattr(checkpoint_io.os, "fdopen", full_disk)
    with pytest.raises(checkpoint_io.CheckpointWriteError, match=r"(?s)could not write checkpoint .*last\.ckpt.*GB "
                                                                 r"free.*previous checkpoint is intact"):
        checkpoint_io.atomic_torch_save({"weights": torch.zeros(100_000)}, path)
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []


def test_temporaries_of_killed_saves_are_removed_at_start(small_dataset, tmp_path):
    from perception.training.runner import checkpoint_dir, train

    directory = checkpoint_dir(str(tmp_path / "work"))
    os.makedirs(directory)
    stale = os.path.join(directory, ".tmp-abc123.ckpt")
    open(stale, "wb").write(b"half a checkpoint")
    train(_short_run(small_dataset, 1), str(tmp_path / "work"))
    assert not os.path.exists(stale)


_BUILD = """
import sys
from perception.data.label_cache import build_label_cache
extra = {"only_if_missing": True} if sys.argv[3] == "1" else {}
build_label_cache(sys.argv[1], "v1.0-trainval", "synthetic_train", ["CAM_FRONT", "CAM_BACK"], sys.argv[2],
                  verbose=False, **extra)
"""


@pytest.mark.parametrize("only_if_missing", [False, True])
def test_concurrent_label_cache_builders_leave_a_complete_cache(small_dataset, tmp_path, only_if_missing):
    """Before: both builders staged into one `<split>.building` folder; the survivor exited 0 with
    masks missing and the cache then said "up to date"."""
    import subprocess
    import sys

    from perception.data.label_cache import load_label_cache

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = str(tmp_path / "cache")
    flag = "1" if only_if_missing else "0"
    builders = [subprocess.Popen([sys.executable, "-c", _BUILD, small_dataset, cache, flag], cwd=repo,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for builder in builders:
        assert builder.wait(timeout=300) == 0, builder.stderr.read()[-2000:]
    infos, directory = load_label_cache(small_dataset, "v1.0-trainval", "synthetic_train",
                                        ["CAM_FRONT", "CAM_BACK"], cache, 60.0)
    assert len(os.listdir(os.path.join(directory, "masks"))) == len(infos) > 0
    assert sorted(os.listdir(os.path.dirname(directory))) == [".synthetic_train.lock", "synthetic_train"]


def test_a_cache_with_missing_masks_is_not_up_to_date(small_dataset, tmp_path):
    from perception.data.label_cache import StaleCacheError, build_label_cache, load_label_cache

    cache = str(tmp_path / "cache")
    directory = build_label_cache(small_dataset, "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, verbose=False)
    masks = os.path.join(directory, "masks")
    os.remove(os.path.join(masks, sorted(os.listdir(masks))[0]))
    with pytest.raises(StaleCacheError, match=r"incomplete \(1 of \d+ masks missing"):
        load_label_cache(small_dataset, "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 60.0)


@pytest.mark.parametrize("filename", ["../../etc/passwd", "/etc/passwd", "samples/../../outside.jpg"])
def test_dataset_paths_that_leave_the_data_root_are_rejected(small_dataset, tmp_path, filename):
    import json

    from perception.data.label_cache import build_label_cache
    from perception.data.tables import DatasetError

    root = tmp_path / "data"
    shutil.copytree(small_dataset, root, ignore=shutil.ignore_patterns("perception_cache"))
    table = root / "v1.0-trainval" / "sample_data.json"
    records = json.loads(table.read_text())
    victim = next(r for r in records if r["filename"].startswith("samples/CAM_FRONT"))
    victim["filename"] = filename
    table.write_text(json.dumps(records))
    with pytest.raises(DatasetError, match=re.escape(f"sample_data {victim['token']}: filename") + ".*leaves the data"):
        for split in ("synthetic_train", "synthetic_val"):
            build_label_cache(str(root), "v1.0-trainval", split, ["CAM_FRONT"], str(tmp_path / "cache"), verbose=False)


def test_bdd_frame_names_that_leave_the_data_root_are_rejected(bdd_dataset, tmp_path):
    import json

    from perception.data.bdd100k import load_bdd100k_infos, split_paths
    from perception.data.tables import DatasetError

    root = tmp_path / "bdd"
    shutil.copytree(bdd_dataset, root)
    labels = split_paths(str(root), "val")["detection"]
    frames = json.loads(open(labels).read())
    frames[0]["name"] = "../../../home/user/.ssh/id_rsa"
    open(labels, "w").write(json.dumps(frames))
    with pytest.raises(DatasetError, match=r"frame name is '\.\./\.\./\.\./home/user/\.ssh/id_rsa', which leaves"):
        load_bdd100k_infos(str(root), "val")


def test_the_stale_cache_hint_repeats_the_runs_options():
    from perception.data.label_cache import rebuild_command

    command = rebuild_command("configs/demo_synthetic.py", {"data_root": "/data/my nuscenes", "cameras": ["CAM_FRONT"]})
    assert command == ("python tools/build_label_cache.py configs/demo_synthetic.py --force --cfg-options "
                       "'data_root=/data/my nuscenes' 'cameras=[\"CAM_FRONT\"]'")


def test_export_into_a_folder_that_cannot_be_written_is_a_clear_error_before_exporting(tmp_path, capsys):
    """Before: an OSError traceback after the export's minutes of checks. (A path below a regular file
    cannot be created by any user, root included, which ignores read-only permission bits.)"""
    from perception.commands import export_onnx

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    args = export_onnx.get_args_parser().parse_args([os.path.join(repo, "configs", "demo_synthetic.py"), "none",
                                                     "--out", str(blocker / "model.onnx")])
    assert export_onnx.main(args) == 2
    assert f"cannot create the folder {blocker}" in capsys.readouterr().err
