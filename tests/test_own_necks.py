"""model.own_necks: a head that reads a feature pyramid of its own shares only the backbone with the others."""

from __future__ import annotations

import pytest
import torch

from perception.build import build_model
from perception.config import ConfigError, parse_config
from tests.conftest import TINY_MODEL, experiment_dict

LIGHT_HEAD = dict(dim=32, num_queries=8, num_layers=1, num_heads=2, ffn_dim=64)


def two_head_config(own_necks: list, **model_overrides):
    model_cfg = dict(TINY_MODEL, heads=dict(drivable=dict(channels=32, num_classes=2), lights=LIGHT_HEAD),
                     own_necks=own_necks, **model_overrides)
    return parse_config(experiment_dict("/unused", model=model_cfg,
                                        bdd100k=dict(data_root="/unused", sample_fraction=0.5)))


def two_head_model(own_necks: list, **model_overrides) -> torch.nn.Module:
    cfg = two_head_config(own_necks, **model_overrides)
    torch.manual_seed(0)
    return build_model(cfg.model, tuple(cfg.input_size))


def test_a_head_with_its_own_neck_reads_the_backbone_not_the_shared_neck():
    model = two_head_model(["lights"]).eval()
    assert list(model.own_necks) == ["lights"]
    images = torch.randn(2, 3, 224, 448)
    with torch.no_grad():
        before = model(images)
        for p in model.neck.parameters():  # change only the shared neck
            p.add_(0.5)
        after = model(images)
    assert torch.equal(before["lights.logits"], after["lights.logits"])
    assert not torch.allclose(before["drivable.logits"], after["drivable.logits"])


def test_its_gradient_reaches_the_backbone_and_its_own_neck_but_not_the_shared_neck():
    model = two_head_model(["lights"]).train()
    model(torch.randn(2, 3, 224, 448))["lights.logits"].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.neck.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.own_necks["lights"].lateral.parameters())
    assert model.backbone.body.patch_embed.proj.weight.grad.abs().sum() > 0


def test_trunk_gradient_scale_applies_to_the_backbone_features_the_own_neck_reads():
    plain = two_head_model(["lights"]).train()
    scaled = two_head_model(["lights"], trunk_gradient_scale={"lights": 0.1}).train()
    scaled.load_state_dict(plain.state_dict())
    images = torch.randn(2, 3, 224, 448)
    grads = []
    for model in (plain, scaled):
        model(images)["lights.logits"].sum().backward()
        grads.append((model.backbone.body.patch_embed.proj.weight.grad.clone(),
                      model.own_necks["lights"].lateral[0].weight.grad.clone()))
    assert torch.allclose(grads[1][0], 0.1 * grads[0][0], rtol=1e-3, atol=1e-7)
    assert torch.allclose(grads[1][1], grads[0][1], rtol=1e-4, atol=1e-7)  # its own neck: the full gradient


def test_on_the_labelled_images_only_it_gives_the_rows_of_the_whole_batch():
    model = two_head_model(["lights"]).eval()
    images = torch.randn(3, 3, 224, 448)
    labelled = {"lights": torch.tensor([True, False, True])}
    with torch.no_grad():
        whole = model(images)["lights.logits"]
        subset = model(images, labelled=labelled)["lights.logits"]
    assert torch.allclose(subset[[0, 2]], whole[[0, 2]], atol=1e-5)
    assert not subset[1].any()


def test_clip_per_part_clips_a_heads_own_neck_with_the_head():
    from perception.training.assembly import build_system

    cfg = two_head_config(["lights"])
    cfg.optimizer.clip_per_part = ["lights"]
    system = build_system(cfg)
    trunk, lights = system.clip_parts()
    own = {id(p) for p in system.model.own_necks["lights"].parameters()}
    assert own <= {id(p) for p in lights} and not own & {id(p) for p in trunk}
    assert {id(p) for p in system.model.neck.parameters()} <= {id(p) for p in trunk}


def test_the_export_passes_every_deployment_check_and_is_the_pytorch_model(tmp_path):
    from perception.export.camera_onnx import export_camera_model

    model = two_head_model(["lights"]).eval()
    sidecar = export_camera_model(model, (224, 448), str(tmp_path / "own_neck.onnx"), batch=1, fp16_images=1)
    checks = sidecar["checks"]
    assert checks["passed"] and not checks["problems"]
    assert {"drivable.logits", "lights.logits", "lights.boxes"} <= set(checks["parity"]["outputs"])


@pytest.mark.parametrize("value", [["light"], "lights"])
def test_bad_own_necks_are_config_errors(value):
    with pytest.raises(ConfigError, match="model.own_necks"):
        two_head_config(value)
