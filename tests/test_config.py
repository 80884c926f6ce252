"""Config loading: _base_ inheritance, --cfg-options, unknown keys and bad values."""

from __future__ import annotations

import pytest

from perception.config import ConfigError, load_config, parse_config
from tests.conftest import experiment_dict


def test_demo_and_swin_t_configs_parse():
    demo = parse_config(load_config("configs/demo_synthetic.py"))
    assert demo.model.backbone.embed_dim == 32 and demo.model.neck.channels == 32
    assert demo.trainer["accelerator"] == "cpu"
    heads = demo.model.heads
    assert all(h is not None for h in (heads.drivable, heads.obstacles, heads.lanes, heads.lights))
    assert demo.bdd100k.data_root == "data/synthetic_bdd100k" and demo.model.heads.drivable.channels == 32
    full = parse_config(load_config("configs/swin_t_nuscenes.py"))
    assert full.model.backbone.name == "swin_tiny_patch4_window7_224" and full.model.backbone.embed_dim is None
    assert full.input_size == (448, 896) and len(full.cameras) == 6
    assert full.bdd100k is None and full.model.heads.lights is None and full.model.heads.lanes is not None
    mixed = parse_config(load_config("configs/swin_t_nuscenes_bdd100k.py"))
    assert mixed.bdd100k.sample_fraction == 0.4 and mixed.model.heads.lights.dim == 128


def test_light_head_without_light_labels_is_rejected():
    with pytest.raises(ConfigError, match="traffic-light labels"):
        parse_config(load_config("configs/swin_t_nuscenes_bdd100k.py", {"bdd100k": None}))


def test_cfg_options_override_nested_and_trainer_keys():
    cfg = load_config("configs/demo_synthetic.py", {"trainer.max_steps": 20, "data_root": "/elsewhere",
                                                    "version": "v1.0-mini", "train_split": "mini_train"})
    parsed = parse_config(cfg)
    assert parsed.trainer["max_steps"] == 20 and parsed.data_root == "/elsewhere"
    assert parsed.version == "v1.0-mini" and parsed.train_split == "mini_train"


@pytest.mark.parametrize("overrides, message", [
    ({"bach_size": 3}, "Did you mean 'batch_size'"),
    ({"model": {"neck": {"chanels": 8}}}, "model.neck.chanels.*Did you mean 'channels'"),
    ({"trainer": {"max_step": 3}}, "trainer.max_step.*Did you mean 'max_steps'"),
    ({"input_size": [230, 448]}, "multiples of 32"),
    ({"optimizer": {"lr": -1.0}}, "lr > 0"),
    ({"cameras": ["CAM_FRONT", "CAM_TOP"]}, "unknown cameras"),
    ({"batch_size": "8"}, "must be int"),
    ({"postprocess": {"lane_line_fit_px": 0.0}}, "lane_line_fit_px must be > 0"),
    ({"postprocess": {"obstacle_merge_radius_scale": 0.0}}, "obstacle_merge_radius_scale must be a number in"),
])
def test_bad_configs_are_rejected_with_a_clear_message(overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(experiment_dict("/data", **overrides))


def test_disabling_a_head_keeps_its_inherited_loss_weights_valid():
    from perception.training.assembly import build_system

    cfg = parse_config(load_config("configs/swin_t_nuscenes.py", {"model.heads.drivable": None}))
    system = build_system(cfg)
    assert set(system.criteria) == {"obstacles", "lanes"}
    # best.ckpt cannot follow a drivable IoU that is never computed: the validation loss instead.
    assert (system.monitor, system.monitor_mode) == ("val/loss", "min")


def test_checkpoint_monitor_follows_the_enabled_tasks():
    from perception.training.assembly import build_system

    camera = build_system(parse_config(load_config("configs/swin_t_nuscenes.py")))
    assert (camera.monitor, camera.monitor_mode) == ("val/drivable_IoU", "max")
    motion = build_system(parse_config(load_config("configs/motion_synthetic.py")))
    assert (motion.monitor, motion.monitor_mode) == ("val/motion_minADE_5", "min")


def test_every_user_error_shares_one_base_the_tools_catch():
    from perception.core.checkpoint import CheckpointMismatchError
    from perception.core.errors import PerceptionError
    from perception.data.bdd100k import Bdd100kFormatError
    from perception.data.image_io import ImageReadError
    from perception.data.label_cache import StaleCacheError
    from perception.data.tables import DatasetError
    from perception.export.graph_checks import ExportCheckError
    from perception.training.checkpoint_io import CheckpointWriteError

    for error in (ConfigError, CheckpointMismatchError, Bdd100kFormatError, ImageReadError, StaleCacheError,
                  DatasetError, ExportCheckError, CheckpointWriteError):
        assert issubclass(error, PerceptionError), error


def test_unknown_loss_weight_is_rejected():
    from perception.training.assembly import build_system

    cfg = parse_config(experiment_dict("/data", loss_weights={"drivable_ce": 1.0, "obstacle_gou": 2.0}))
    with pytest.raises(ValueError, match="obstacle_gou"):
        build_system(cfg)


def test_motion_configs_parse_into_their_own_type():
    from perception.config import MotionExperimentConfig

    cfg = parse_config(load_config("configs/motion_synthetic.py"))
    assert isinstance(cfg, MotionExperimentConfig)
    assert cfg.model.num_modes == 5 and cfg.data.future_seconds == 6.0 and cfg.data.use_map is True
    real = parse_config(load_config("configs/motion_nuscenes.py"))
    assert real.train_split == "train" and real.val_split == "val"


@pytest.mark.parametrize("overrides, message", [
    ({"task": "motoin"}, "task.*must be one of"),
    ({"model": {"num_mode": 3}}, "model.num_mode.*Did you mean 'num_modes'"),
    ({"input_size": [224, 448]}, "unknown config key input_size"),  # a camera key in a motion config
    ({"data": {"future_seconds": 5.2}}, "multiple of 0.5"),
    ({"model": {"dim": 30, "num_heads": 4}}, "divisible by model.num_heads"),
    ({"loss_weights": {"motion_regg": 1.0}}, "motion_regg"),
    ({"data": {"mirror_prob": 1.5}}, "mirror_prob"),
])
def test_bad_motion_configs_are_rejected(overrides, message):
    from tests.conftest import motion_experiment_dict

    with pytest.raises(ConfigError, match=message):
        parse_config(motion_experiment_dict("/data", **overrides))
