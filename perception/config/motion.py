"""Trajectory forecasting configs (``task = "motion"``) and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from perception.config.common import FaultsConfig, OptimizerConfig, SchedulerConfig, _validate_training
from perception.core.errors import ConfigError


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
