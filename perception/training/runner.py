"""Training entry: resolve the config, build everything, run a Lightning Trainer in a work dir."""

from __future__ import annotations

import datetime
import glob
import os

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from mmengine.config import Config

from perception.build import build_datamodule
from perception.config import parse_config
from perception.core.checkpoint import check_resume_fits
from perception.tasks import CAMERA_TASKS
from perception.training.assembly import build_system
from perception.training.checkpoint_io import AtomicCheckpointIO
from perception.training.curves import plot_curves
from perception.training.heldout import HeldOutEvaluation
from perception.training.preemption import SaveOnSigterm, TrainingPreempted, remove_stale_temporaries
from perception.training.rng_state import RngStateCallback
from perception.training.tensorboard_frames import TensorBoardFrames


def checkpoint_dir(work_dir: str) -> str:
    return os.path.join(work_dir, "checkpoints")


def resolve_resume(work_dir: str, resume: str | bool | None) -> str | None:
    """Checkpoint to resume from.

    ``True``: the work dir's newest checkpoint (a SLURM ``hpc_ckpt_*.ckpt`` or ``last.ckpt``); an
    error if there is none. ``"auto"``: the same, or None (a fresh start) when there is none, for
    cluster jobs that may or may not be restarts. A path must exist: never a silent fresh start.
    """
    if resume is None or resume is False:
        return None
    if resume is True or resume == "auto":
        candidates = glob.glob(os.path.join(checkpoint_dir(work_dir), "*.ckpt"))
        candidates += glob.glob(os.path.join(work_dir, "hpc_ckpt_*.ckpt"))  # Lightning's SLURM pre-emption saves
        if not candidates:
            if resume == "auto":
                return None
            raise FileNotFoundError(f"--resume given but {checkpoint_dir(work_dir)} holds no checkpoint; "
                                    "drop --resume to start fresh (or use --resume auto)")
        last = os.path.join(checkpoint_dir(work_dir), "last.ckpt")
        newest = max(candidates, key=os.path.getmtime)
        # best.ckpt is never newer than last.ckpt in content; prefer last when they tie.
        return last if os.path.isfile(last) and os.path.getmtime(last) >= os.path.getmtime(newest) else newest
    if not os.path.isfile(resume):
        raise FileNotFoundError(f"--resume checkpoint {resume} does not exist (refusing to start from scratch)")
    return resume


def train(cfg: Config, work_dir: str, resume: str | bool | None = None, callbacks: list | None = None,
          tasks: tuple = CAMERA_TASKS) -> dict:
    """Train as configured; returns the final logged metrics (floats). ``callbacks`` are added to ours;
    ``tasks``: the camera task specs the config's ``model.heads`` may name."""
    experiment = parse_config(cfg, tasks)
    os.makedirs(work_dir, exist_ok=True)
    resolved_path = os.path.join(work_dir, "config.py")
    cfg.dump(resolved_path)
    with open(resolved_path) as f:
        config_text = f.read()
    remove_stale_temporaries(checkpoint_dir(work_dir))  # a save killed mid-write leaves its temporary
    ckpt_path = resolve_resume(work_dir, resume)
    L.seed_everything(experiment.seed, workers=True)

    datamodule = build_datamodule(experiment)
    system = build_system(experiment, config_text=config_text)
    if ckpt_path is not None:
        check_resume_fits(system.model, ckpt_path)
    monitor, mode = system.monitor, system.monitor_mode
    trainer_callbacks = [
        ModelCheckpoint(dirpath=checkpoint_dir(work_dir), filename="best", monitor=monitor, mode=mode,
                        save_top_k=1, save_last=True, auto_insert_metric_name=False, enable_version_counter=False),
        LearningRateMonitor(logging_interval="step"),
        RngStateCallback(),
    ]
    if experiment.checkpoint_every_n_steps:
        # Mid-epoch saves for preemptible jobs; the data loader's position is in them (exact resume).
        trainer_callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir(work_dir), save_top_k=0, save_last=True,
                                                 every_n_train_steps=experiment.checkpoint_every_n_steps,
                                                 enable_version_counter=False))
    if experiment.checkpoint_every_n_minutes:
        # Wall-clock saves: no default run loses more than this, whatever its validation schedule.
        interval = datetime.timedelta(minutes=experiment.checkpoint_every_n_minutes)
        trainer_callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir(work_dir), save_top_k=0, save_last=True,
                                                 train_time_interval=interval, enable_version_counter=False))
    on_sigterm = SaveOnSigterm(os.path.join(checkpoint_dir(work_dir), "last.ckpt"))
    trainer_callbacks.append(on_sigterm)
    heldout_every = getattr(experiment, "heldout_eval_every_n_steps", 0)  # camera configs only
    if heldout_every:
        trainer_callbacks.append(HeldOutEvaluation(experiment, work_dir, heldout_every))
    if hasattr(experiment, "postprocess"):  # camera configs: drawn validation frames in TensorBoard
        trainer_callbacks.append(TensorBoardFrames(experiment))
    trainer_callbacks += list(callbacks or [])
    trainer_args = dict(experiment.trainer)
    if trainer_args.get("enable_progress_bar", True):
        trainer_callbacks.append(TQDMProgressBar(refresh_rate=10))
    loggers = [TensorBoardLogger(work_dir, name="tensorboard", version=""), CSVLogger(work_dir, name="csv", version="")]
    # Our samplers shard across ranks themselves (and resume mid-epoch); Lightning must not swap
    # them for a DistributedSampler.
    trainer = L.Trainer(default_root_dir=work_dir, callbacks=trainer_callbacks, logger=loggers,
                        plugins=[AtomicCheckpointIO()], use_distributed_sampler=False, **trainer_args)
    try:
        trainer.fit(system, datamodule=datamodule, ckpt_path=ckpt_path)
    except SIGTERMException as interrupt:
        raise TrainingPreempted(on_sigterm.saved) from interrupt
    metrics_csv = os.path.join(work_dir, "csv", "metrics.csv")
    if trainer.is_global_zero and os.path.isfile(metrics_csv):
        print(f"learning curves: {plot_curves(metrics_csv, os.path.join(work_dir, 'curves.png'))}")
    return {k: float(v) for k, v in trainer.callback_metrics.items()}
