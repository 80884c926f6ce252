"""model.heads.drivable.merge_stride: the drivable head merging the FPN levels at stride 8, and the shared neck
that then computes no stride-4 level (every neck computes only the levels its readers read)."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from conftest import TINY_MODEL, experiment_dict

from perception.build import build_model
from perception.config import ConfigError, parse_config
from perception.export.camera_onnx import export_camera_model

INPUT_SIZE = (224, 448)
LIGHT_HEAD = dict(dim=32, num_queries=8, num_layers=1, num_heads=2, ffn_dim=64, levels=[0, 1, 2])


def model_with(merge_stride: int, own_necks=("lights",), seed: int = 0, **model_overrides):
    heads = dict(drivable=dict(channels=32, num_classes=2, merge_stride=merge_stride), lights=LIGHT_HEAD)
    cfg = parse_config(experiment_dict("/unused", model=dict(TINY_MODEL, heads=heads, own_necks=list(own_necks),
                                                             **model_overrides),
                                       bdd100k=dict(data_root="/unused", sample_fraction=0.5)))
    torch.manual_seed(seed)
    return cfg, build_model(cfg.model, INPUT_SIZE)


def test_stride_8_keeps_the_output_contract_and_its_only_neck_drops_stride_4():
    _, model = model_with(8)
    assert model.neck.out_levels == (1, 2, 3)  # the shared neck's only reader is the drivable head
    keys = set(model.state_dict())
    assert not any(k.startswith(("neck.output.0.", "neck.lateral.0.", "heads.drivable.reduce.0.")) for k in keys)
    assert "own_necks.lights.output.0.0.weight" in keys  # the lights' own neck still computes stride 4
    with torch.no_grad():
        logits = model.eval()(torch.randn(2, 3, *INPUT_SIZE))["drivable.logits"]
    assert logits.shape == (2, 2, INPUT_SIZE[0] // 4, INPUT_SIZE[1] // 4)  # [B,2,H/4,W/4] at either stride


def test_every_weight_learns_with_the_levels_left_out():
    """Heads on their labelled images and the trunk gradient at norm 1 both see the shared neck's missing level
    (None): every weight is still used (DDP stops on one that is not), and the neck and head learn."""
    _, model = model_with(8, trunk_gradient_norm=1.0)
    model.train()
    labelled = {"drivable": torch.tensor([True, False, True]), "lights": torch.tensor([False, True, False])}
    outputs = model(torch.randn(3, 3, *INPUT_SIZE), labelled=labelled)
    sum(value.float().square().mean() for value in outputs.values()).backward()
    assert not [name for name, p in model.named_parameters() if p.grad is None]
    shared_trunk = [*model.neck.named_parameters("neck"), *model.heads["drivable"].named_parameters("drivable")]
    assert not [name for name, p in shared_trunk if not p.grad.any()]


def test_a_neck_keeps_every_level_one_of_its_readers_reads():
    _, model = model_with(8, own_necks=())  # the light head (levels 0-2) reads the shared neck too
    assert model.neck.out_levels == (0, 1, 2, 3)
    _, default = model_with(4)
    assert default.neck.out_levels == (0, 1, 2, 3) and len(default.heads["drivable"].reduce) == 4


def test_stride_8_draws_the_same_random_numbers_for_every_kept_weight():
    """The pruned pyramid and head are built in full first: a seeded run differs from stride 4 only in the
    weights stride 8 does not have."""
    _, stride4 = model_with(4)
    _, stride8 = model_with(8)
    kept = stride8.state_dict()
    for key, value in stride4.state_dict().items():
        if key in kept:
            assert torch.equal(value, kept[key]), key
        else:
            assert key.startswith(("neck.output.0.", "neck.lateral.0.", "heads.drivable.reduce.0.")), key


def test_merge_stride_other_than_4_or_8_is_a_config_error():
    with pytest.raises(ConfigError, match="model.heads.drivable.merge_stride must be 4 or 8, got 16"):
        model_with(16)


def test_stride_8_exports_with_every_deployment_check(tmp_path):
    cfg, model = model_with(8)
    sidecar = export_camera_model(model.eval(), INPUT_SIZE, str(tmp_path / "model.onnx"), batch=1,
                                  config_text="# config", postprocess=asdict(cfg.postprocess))
    checks = sidecar["checks"]
    assert checks["passed"] and not checks["problems"]
    difference = checks["parity"]["outputs"]["drivable.logits"]
    assert difference["max_abs_reference"] > 0 and difference["max_abs_diff"] < 1e-4
    assert sidecar["outputs"]["drivable.logits"]["shape"] == [1, 2, INPUT_SIZE[0] // 4, INPUT_SIZE[1] // 4]
