"""Configs: mmengine Python files (one level of ``_base_``) checked against typed dataclasses.

Dicts become dataclasses at one place (``parse_config``); unknown keys anywhere are an error
with a did-you-mean, bad values are rejected before anything is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin, get_type_hints

from perception.core.errors import ConfigError  # noqa: F401  (raised by the parsers below; importable from here)
from perception.core.nuscenes_constants import CAMERAS
from perception.tasks import CAMERA_TASKS
from perception.tasks.drivable import DrivableHeadConfig  # noqa: F401  (the head configs, importable from here)
from perception.tasks.lanes import LaneHeadConfig  # noqa: F401
from perception.tasks.lights import LightHeadConfig  # noqa: F401
from perception.tasks.obstacles import ObstacleHeadConfig  # noqa: F401


@dataclass
class BackboneConfig:
    name: str = "swin_tiny_patch4_window7_224"
    pretrained_path: str | None = None  # local timm checkpoint; never downloaded
    drop_path_rate: float = 0.1
    # Architecture overrides passed to timm (None keeps the named model's value).
    embed_dim: int | None = None
    depths: tuple | None = None
    num_heads: tuple | None = None
    window_size: int | None = None


@dataclass
class NeckConfig:
    channels: int = 96


def heads_config_class(tasks: tuple) -> type:
    """The ``model.heads`` dataclass of a task tuple: one field per task, its head config or None (off).

    ``enabled`` lists the specs of the heads that are on, in the tuple's order."""
    if tasks not in _HEADS_CLASSES:
        fields = [(t.name, t.config_class | None, field(default_factory=t.config_class) if t.enabled_by_default
                   else field(default=None)) for t in tasks]
        enabled = property(lambda self: tuple(t for t in tasks if getattr(self, t.name) is not None))
        _HEADS_CLASSES[tasks] = dataclasses.make_dataclass("HeadsConfig", fields,
                                                           namespace={"tasks": tasks, "enabled": enabled})
    return _HEADS_CLASSES[tasks]


_HEADS_CLASSES: dict[tuple, type] = {}
HeadsConfig = heads_config_class(CAMERA_TASKS)


@dataclass
class MatcherConfig:
    cost_class: float = 2.0
    cost_bbox: float = 5.0
    cost_giou: float = 2.0
    cost_points: float = 5.0  # lanes: mean L1 of x over the target's visible rows
    # Weight of the dense one-to-many losses on every memory token (perception.losses.dense_assign),
    # added to the set losses of the same names; trains query selection. 0 turns them off.
    dense_weight: float = 1.0
    # "all": every token the assigner picks is a class positive; "one": only each object's best token
    # is (the others still regress but are left out of the class loss), so query selection is not
    # filled with duplicates of one object.
    dense_class_positives: str = "all"


@dataclass
class PostprocessConfig:
    obstacle_max_per_image: int = 100
    obstacle_score_threshold: float = 0.05
    lane_score_threshold: float = 0.3  # lane F1 is measured at this one operating point
    lane_visibility_threshold: float = 0.5
    light_max_per_image: int = 30
    light_score_threshold: float = 0.05


@dataclass
class Bdd100kConfig:
    """A BDD100K-format dataset mixed into training (perception.data.bdd100k has the layout)."""

    data_root: str
    train_split: str = "train"
    val_split: str = "val"
    # Fraction of training items drawn from BDD100K; the rest come from nuScenes.
    sample_fraction: float = 0.5


@dataclass
class ModelConfig:
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    neck: NeckConfig = field(default_factory=NeckConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)


@dataclass
class AugmentConfig:
    scale_range: tuple = (0.9, 1.15)
    flip_prob: float = 0.5
    photometric: bool = True


@dataclass
class OptimizerConfig:
    lr: float = 2e-4
    weight_decay: float = 0.05
    backbone_lr_mult: float = 0.1
    betas: tuple = (0.9, 0.999)


@dataclass
class SchedulerConfig:
    warmup_steps: int = 500
    warmup_ratio: float = 0.001  # LR at step 0, relative to the base LR
    min_lr_ratio: float = 0.01  # LR at the end of the cosine, relative to the base LR


@dataclass
class FaultsConfig:
    # Training steps whose loss is NaN/inf are skipped (decided jointly by all ranks) up to this
    # many; one more stops the run with the per-task losses.
    max_nonfinite_steps: int = 20
    # Unreadable training images are replaced by the next item and counted, up to this many per rank.
    max_bad_images: int = 100


@dataclass
class ExperimentConfig:
    """Camera perception (drivable area, obstacles, lanes, traffic lights): the default task."""

    data_root: str
    version: str
    train_split: str
    val_split: str
    input_size: tuple  # (H, W) of the network input
    cameras: tuple = CAMERAS
    cache_root: str | None = None  # default <data_root>/perception_cache
    drivable_max_range: float = 60.0
    bdd100k: Bdd100kConfig | None = None  # None: nuScenes only
    # nuScenes cameras whose map-derived lanes are supervised and scored (markings run away from
    # them); in the others lanes count as unlabelled (perception.data.camera_dataset).
    lane_cameras: tuple = ("CAM_FRONT", "CAM_BACK")
    # Obstacle targets of which a camera sees less than this fraction (occlusion by nearer annotated
    # boxes, perception.data.occlusion) are dropped from that camera's targets; evaluation is unaffected.
    min_obstacle_visibility: float = 0.2
    batch_size: int = 2
    val_batch_size: int = 4
    num_workers: int = 4
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss_weights: dict = field(default_factory=lambda: {"drivable_ce": 1.0, "drivable_dice": 1.0})
    matcher: MatcherConfig = field(default_factory=MatcherConfig)
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    trainer: dict = field(default_factory=dict)  # lightning.Trainer arguments
    # Score the held-out validation split (tools/test.py's metrics) every N steps and at the end of
    # training, logged as heldout/* and drawn into <work_dir>/curves.png (0: only val/* is logged).
    heldout_eval_every_n_steps: int = 0
    checkpoint_every_n_steps: int = 0  # also write last.ckpt every N steps (0: off)
    checkpoint_every_n_minutes: float = 10.0  # also write last.ckpt every N minutes of training (0: off)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    seed: int = 0
    task: str = "perception"


@dataclass
class MotionDataConfig:
    past_seconds: float = 2.0
    future_seconds: float = 6.0  # the nuScenes prediction challenge horizon
    use_map: bool = True  # lane centrelines near the agent as extra encoder tokens
    map_radius: float = 50.0
    max_lanes: int = 32
    lane_points: int = 10
    lane_resolution: float = 2.0
    mirror_prob: float = 0.5  # training augmentation: mirror the agent frame left-right


@dataclass
class MotionModelConfig:
    dim: int = 64
    num_heads: int = 4
    ffn_dim: int = 256
    encoder_layers: int = 2
    decoder_layers: int = 2
    num_modes: int = 5
    dropout: float = 0.0


@dataclass
class MotionExperimentConfig:
    """Trajectory forecasting (``task = "motion"``) on nuScenes prediction-challenge agents."""

    task: str
    data_root: str
    version: str
    train_split: str
    val_split: str
    cache_root: str | None = None  # default <data_root>/perception_cache
    data: MotionDataConfig = field(default_factory=MotionDataConfig)
    model: MotionModelConfig = field(default_factory=MotionModelConfig)
    # motion_reg_self_fed = 0 turns off the pass on the model's own rollout (pure teacher forcing)
    loss_weights: dict = field(default_factory=lambda: {"motion_reg": 1.0, "motion_reg_self_fed": 1.0,
                                                        "motion_cls": 0.5})
    batch_size: int = 64
    val_batch_size: int = 256
    num_workers: int = 0
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    trainer: dict = field(default_factory=dict)  # lightning.Trainer arguments
    checkpoint_every_n_steps: int = 0  # also write last.ckpt every N steps (0: off)
    checkpoint_every_n_minutes: float = 10.0  # also write last.ckpt every N minutes of training (0: off)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    seed: int = 0


TASKS = ("perception", "motion")


def _did_you_mean(key: str, allowed) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else f" Allowed keys: {sorted(allowed)}."


def _parse(cls, data: Any, path: str, tasks: tuple = CAMERA_TASKS):
    if not isinstance(data, dict):
        raise ConfigError(f"config key {path!r} must be a dict, got {type(data).__name__}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError(f"unknown config key {path + '.' if path else ''}{key}.{_did_you_mean(key, names)}")
    values = {}
    for f in dataclasses.fields(cls):
        key_path = f"{path}.{f.name}" if path else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config key {key_path!r} is required")
            continue
        value = data[f.name]
        hint = hints[f.name]
        nested = [t for t in (get_args(hint) or (hint,)) if dataclasses.is_dataclass(t)]
        if nested and nested[0] is HeadsConfig:  # the heads of the task tuple this config is parsed for
            nested = [heads_config_class(tasks)]
        if nested and value is not None:
            value = _parse(nested[0], dict(value), key_path, tasks)
        elif isinstance(value, list) and (hint is tuple or tuple in (get_args(hint) or ())):
            value = tuple(value)
        elif get_origin(hint) is None and hint in (int, float, str, bool) and value is not None:
            if hint is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
                raise ConfigError(f"config key {key_path!r} must be {hint.__name__}, got {value!r}")
        values[f.name] = value
    return cls(**values)


def _to_plain(value):
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def parse_config(cfg, tasks: tuple = CAMERA_TASKS) -> ExperimentConfig | MotionExperimentConfig:
    """Typed, validated experiment config from an mmengine Config (or plain dict); ``task`` picks the type.

    ``tasks``: the camera task specs ``model.heads`` may name (perception.tasks.CAMERA_TASKS)."""
    data = {k: v for k, v in _to_plain(cfg).items() if not k.startswith("_")}
    task = data.get("task", "perception")
    if task not in TASKS:
        raise ConfigError(f"config key 'task' must be one of {list(TASKS)}, got {task!r}")
    if task == "motion":
        experiment = _parse(MotionExperimentConfig, data, "")
        validate_motion(experiment)
        return experiment
    model = data.setdefault("model", {})
    if isinstance(model, dict):
        model.setdefault("heads", {})  # absent: every task's default (its enabled_by_default)
    experiment = _parse(ExperimentConfig, data, "", tasks)
    validate(experiment)
    return experiment


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


def _validate_training(cfg) -> None:
    """Checks shared by every task: optimizer, batch sizes, trainer keys, loss weights."""
    if cfg.optimizer.lr <= 0 or cfg.optimizer.backbone_lr_mult < 0 or cfg.optimizer.weight_decay < 0:
        raise ConfigError(f"optimizer needs lr > 0, backbone_lr_mult >= 0, weight_decay >= 0; got {cfg.optimizer}")
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


def validate_motion(cfg: MotionExperimentConfig) -> None:
    _validate_training(cfg)
    d, m = cfg.data, cfg.model
    for name in ("past_seconds", "future_seconds"):
        seconds = getattr(d, name)
        if seconds <= 0 or abs(seconds * 2 - round(seconds * 2)) > 1e-9:
            raise ConfigError(f"data.{name} must be a positive multiple of 0.5 s (nuScenes keyframes are 2 Hz), "
                              f"got {seconds}")
    if d.max_lanes < 1 or d.lane_points < 2 or d.lane_resolution <= 0 or d.map_radius <= 0:
        raise ConfigError("data needs max_lanes >= 1, lane_points >= 2, lane_resolution > 0 and map_radius > 0")
    if not 0 <= d.mirror_prob <= 1:
        raise ConfigError(f"data.mirror_prob must be in [0, 1], got {d.mirror_prob}")
    if m.dim % m.num_heads or m.dim % 2:
        raise ConfigError(f"model.dim {m.dim} must be even and divisible by model.num_heads {m.num_heads}")
    if m.num_modes < 1 or m.encoder_layers < 1 or m.decoder_layers < 1:
        raise ConfigError("model needs num_modes, encoder_layers and decoder_layers >= 1")
    known = {"motion_reg", "motion_reg_self_fed", "motion_cls"}
    unknown = set(cfg.loss_weights) - known
    if unknown:
        raise ConfigError(f"loss_weights has keys {sorted(unknown)}; motion losses are {sorted(known)}")


def validate(cfg: ExperimentConfig) -> None:
    """Reject values that would only fail (or silently misbehave) later."""
    _validate_training(cfg)
    height, width = cfg.input_size
    if height % 32 or width % 32 or height <= 0 or width <= 0:
        raise ConfigError(f"input_size {list(cfg.input_size)} must be positive multiples of 32 (Swin patch 4 x "
                          "three 2x merges); multiples of 224 avoid window padding, e.g. [448, 896]")
    unknown = [c for c in list(cfg.cameras) + list(cfg.lane_cameras) if c not in CAMERAS]
    if unknown:
        raise ConfigError(f"unknown cameras {unknown}; nuScenes cameras are {list(CAMERAS)}")
    if cfg.matcher.dense_class_positives not in ("all", "one"):
        raise ConfigError(f"matcher.dense_class_positives must be 'all' or 'one', got "
                          f"{cfg.matcher.dense_class_positives!r}")
    if not 0.0 <= cfg.min_obstacle_visibility < 1.0:
        raise ConfigError(f"min_obstacle_visibility must be in [0, 1), got {cfg.min_obstacle_visibility}")
    low, high = cfg.augment.scale_range
    if not 0 < low <= high:
        raise ConfigError(f"augment.scale_range must be 0 < low <= high, got {cfg.augment.scale_range}")
    for task in cfg.model.heads.enabled:
        task.validate(getattr(cfg.model.heads, task.name), cfg)
    if not cfg.model.heads.enabled:
        raise ConfigError("model.heads enables no head; set at least one of "
                          f"{[t.name for t in cfg.model.heads.tasks]}")
    if cfg.bdd100k is not None and not 0 <= cfg.bdd100k.sample_fraction <= 1:
        raise ConfigError(f"bdd100k.sample_fraction must be in [0, 1], got {cfg.bdd100k.sample_fraction}")


def _trainer_class():
    import lightning

    return lightning.Trainer


def load_config(path: str, cfg_options: dict | None = None):
    """mmengine Config from a file, with ``--cfg-options`` style overrides (``a.b=value``)."""
    from mmengine.config import Config

    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {path} does not exist")
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg
