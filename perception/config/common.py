"""Config parts every experiment shares (optimizer, schedule, faults) and their checks."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass

from perception.core.errors import ConfigError


@dataclass
class OptimizerConfig:
    lr: float = 2e-4
    weight_decay: float = 0.05
    backbone_lr_mult: float = 0.1
    betas: tuple = (0.9, 0.999)
    # Per head name, AdamW's betas for that head's own weights (its optimizer groups are its own); every other
    # weight takes ``betas``. E.g. a short schedule's 0.99 for the trunk and box heads, 0.999 for the lanes.
    head_betas: dict | None = None
    # > 0: evaluate and export an exponential moving average of the weights (perception.training.ema);
    # 0: the raw weights.
    ema_decay: float = 0.0
    # With trainer.gradient_clip_val: clip the gradient norm of each part of the network on its own (the
    # shared trunk, each head) instead of the whole gradient's: a head with large gradients (the light head's
    # GIoU on boxes a few pixels wide) then no longer scales down every other head's step. A list of head
    # names clips only those heads on their own, and the trunk with the other heads as one part.
    clip_per_part: bool | list = False


LR_DECAYS = ("cosine", "linear")


@dataclass
class SchedulerConfig:
    warmup_steps: int = 500
    warmup_ratio: float = 0.001  # LR at step 0, relative to the base LR
    min_lr_ratio: float = 0.01  # LR at the end of the decay, relative to the base LR
    # Shape of the decay after the warmup: "cosine" (half a cosine) or "linear" (a straight line down to
    # min_lr_ratio; Bergsma et al. 2025, "Straight to Zero": linear decay to ~0 beat cosine at equal steps).
    decay: str = "cosine"


@dataclass
class FaultsConfig:
    # Training steps whose loss is NaN/inf are skipped (decided jointly by all ranks) up to this
    # many; one more stops the run with the per-task losses.
    max_nonfinite_steps: int = 20
    # Unreadable training images are replaced by the next item and counted, up to this many per rank.
    max_bad_images: int = 100


def _did_you_mean(key: str, allowed) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else f" Allowed keys: {sorted(allowed)}."


def _validate_duration(trainer: dict) -> None:
    """trainer.max_steps / max_epochs: whole numbers, -1 (no limit) or >= 1, checked before Lightning sees them."""
    for key in ("max_steps", "max_epochs"):
        if key not in trainer or trainer[key] is None:
            continue
        value = trainer[key]
        if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
            raise ConfigError(f"trainer.{key} must be a whole number >= 1 (or -1 for no limit), got {value!r}")
    if trainer.get("max_steps", -1) == -1 and trainer.get("max_epochs", 1) == -1:
        raise ConfigError("trainer.max_steps and trainer.max_epochs are both -1: the run would never end; set one")


def is_number(value) -> bool:
    """An int or a float from the config, not a bool (True is an int in Python)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_betas(key: str, betas) -> None:
    if (not isinstance(betas, (list, tuple)) or len(betas) != 2
            or not all(is_number(b) and 0.0 <= b < 1.0 for b in betas)):
        raise ConfigError(f"{key} must be two numbers in [0, 1) (AdamW's moment decays), got {betas!r}")


def _validate_training(cfg) -> None:
    """Checks shared by every task: optimizer, batch sizes, trainer keys, loss weights."""
    if cfg.optimizer.lr <= 0 or cfg.optimizer.backbone_lr_mult < 0 or cfg.optimizer.weight_decay < 0:
        raise ConfigError(f"optimizer needs lr > 0, backbone_lr_mult >= 0, weight_decay >= 0; got {cfg.optimizer}")
    _check_betas("optimizer.betas", cfg.optimizer.betas)
    head_betas = cfg.optimizer.head_betas or {}
    if not isinstance(head_betas, dict):
        raise ConfigError(f"optimizer.head_betas must map head names to betas, got {head_betas!r}")
    for name, betas in head_betas.items():
        _check_betas(f"optimizer.head_betas.{name}", betas)
    if not 0.0 <= cfg.optimizer.ema_decay < 1.0:
        raise ConfigError(f"optimizer.ema_decay must be in [0, 1) (0: off), got {cfg.optimizer.ema_decay}")
    clip = cfg.optimizer.clip_per_part
    if not (isinstance(clip, bool) or (isinstance(clip, (list, tuple)) and all(isinstance(h, str) for h in clip))):
        raise ConfigError(f"optimizer.clip_per_part must be true, false or a list of head names, got {clip!r}")
    if cfg.optimizer.clip_per_part and not cfg.trainer.get("gradient_clip_val"):
        raise ConfigError("optimizer.clip_per_part clips each part's gradient to trainer.gradient_clip_val; "
                          "set trainer.gradient_clip_val (e.g. 1.0) or turn clip_per_part off")
    if cfg.optimizer.clip_per_part and cfg.trainer.get("gradient_clip_algorithm", "norm") != "norm":
        raise ConfigError("optimizer.clip_per_part clips each part's gradient norm; it needs "
                          "trainer.gradient_clip_algorithm='norm' (the default), got "
                          f"{cfg.trainer['gradient_clip_algorithm']!r}")
    if cfg.scheduler.decay not in LR_DECAYS:
        raise ConfigError(f"scheduler.decay must be one of {LR_DECAYS}, got {cfg.scheduler.decay!r}")
    if not 0.0 <= cfg.scheduler.min_lr_ratio <= 1.0 or not 0.0 <= cfg.scheduler.warmup_ratio <= 1.0:
        raise ConfigError("scheduler.min_lr_ratio and scheduler.warmup_ratio must be in [0, 1], got "
                          f"{cfg.scheduler.min_lr_ratio} and {cfg.scheduler.warmup_ratio}")
    if cfg.batch_size < 1 or cfg.val_batch_size < 1 or cfg.num_workers < 0:
        raise ConfigError("batch_size and val_batch_size must be >= 1 and num_workers >= 0")
    if cfg.faults.max_nonfinite_steps < 0 or cfg.faults.max_bad_images < 0:
        raise ConfigError(f"faults.max_nonfinite_steps and faults.max_bad_images must be >= 0, got {cfg.faults}")
    if cfg.checkpoint_every_n_steps < 0 or cfg.checkpoint_every_n_minutes < 0:
        raise ConfigError(f"checkpoint_every_n_steps and checkpoint_every_n_minutes must be >= 0, got "
                          f"{cfg.checkpoint_every_n_steps} and {cfg.checkpoint_every_n_minutes}")
    _validate_duration(cfg.trainer)
    trainer_args = set(inspect.signature(_trainer_class().__init__).parameters) - {"self"}
    managed = {"default_root_dir", "callbacks", "logger", "plugins", "use_distributed_sampler"}
    for key in sorted(managed & set(cfg.trainer)):
        raise ConfigError(f"trainer.{key} is set by tools/train.py (work dir, checkpoints, loggers, atomic saves, "
                          "resumable sharded sampling); remove it from the config")
    for key in cfg.trainer:
        if key not in trainer_args:
            raise ConfigError(f"unknown config key trainer.{key} (not a lightning.Trainer argument)."
                              f"{_did_you_mean(key, trainer_args)}")
    for key, weight in cfg.loss_weights.items():
        if not isinstance(weight, (int, float)) or weight < 0:
            raise ConfigError(f"loss_weights.{key} must be a number >= 0, got {weight!r}")


def _trainer_class():
    import lightning

    return lightning.Trainer
