"""The engine's assembly: a validated config -> the LightningModule that trains it."""

from __future__ import annotations

from perception.build import build_criteria, build_model, build_motion_model
from perception.config import ExperimentConfig, MotionExperimentConfig


def build_system(cfg: ExperimentConfig | MotionExperimentConfig, config_text: str = ""):
    if isinstance(cfg, MotionExperimentConfig):
        from perception.training.motion_system import MotionSystem

        return MotionSystem(build_motion_model(cfg), cfg.loss_weights, cfg.optimizer, cfg.scheduler,
                            config_text=config_text, faults=cfg.faults)
    from perception.training.system import PerceptionSystem

    model = build_model(cfg.model, tuple(cfg.input_size))
    heads = cfg.model.heads
    # Weights of every known task's losses are accepted (configs inherit them); others are typos.
    known = tuple(name for task in heads.tasks for name in task.loss_names)
    return PerceptionSystem(model, build_criteria(cfg), cfg.loss_weights, cfg.optimizer, cfg.scheduler,
                            config_text=config_text, known_loss_names=known, faults=cfg.faults,
                            validation_metrics=[m for m in (task.validation_metric() for task in heads.enabled)
                                                if m is not None])
