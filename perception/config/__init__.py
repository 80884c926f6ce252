"""Configs: mmengine Python files (one level of ``_base_``) checked against typed dataclasses.

Dicts become dataclasses at one place (``parse_config``); unknown keys anywhere are an error
with a did-you-mean, bad values are rejected before anything is built. The dataclasses live in
``camera`` (the default task, its heads from perception.tasks), ``motion`` and ``common``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, get_args, get_origin, get_type_hints

from perception.config.camera import (  # noqa: F401  (the config types, importable from here)
    AugmentConfig,
    BackboneConfig,
    Bdd100kConfig,
    ExperimentConfig,
    HeadsConfig,
    MatcherConfig,
    ModelConfig,
    NeckConfig,
    PostprocessConfig,
    heads_config_class,
    validate,
)
from perception.config.common import FaultsConfig, OptimizerConfig, SchedulerConfig, _did_you_mean  # noqa: F401
from perception.config.motion import (  # noqa: F401
    MotionDataConfig,
    MotionExperimentConfig,
    MotionModelConfig,
    validate_motion,
)
from perception.core.errors import ConfigError
from perception.tasks import CAMERA_TASKS
from perception.tasks.drivable import DrivableHeadConfig  # noqa: F401  (the head configs, importable from here)
from perception.tasks.lanes import LaneHeadConfig  # noqa: F401
from perception.tasks.lights import LightHeadConfig  # noqa: F401
from perception.tasks.obstacles import ObstacleHeadConfig  # noqa: F401

TASKS = ("perception", "motion")


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


def load_config(path: str, cfg_options: dict | None = None):
    """mmengine Config from a file, with ``--cfg-options`` style overrides (``a.b=value``)."""
    from mmengine.config import Config

    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {path} does not exist")
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg
