"""model.own_necks: a head that reads a feature pyramid of its own shares only the backbone with the others."""

from __future__ import annotations

import os

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


def test_a_neck_of_its_own_computes_only_the_levels_its_head_reads_and_old_checkpoints_still_load(tmp_path):
    """The obstacle and lane heads' memories read strides 8-32, the lights 4-16 (the demo): a pyramid of their own
    builds no conv for the rest (no weight without a gradient under DDP, no wasted work). Built in full and then
    pruned, the kept weights are those of the full pyramid at the same seed (seeded runs reproduce), and a checkpoint
    holding the pruned weights loads for testing but cannot be resumed (its optimizer state counts them)."""
    from perception.core.checkpoint import CheckpointMismatchError, check_resume_fits, load_model_weights
    from perception.models.fpn import FPN

    torch.manual_seed(0)
    full = FPN([32, 64, 128, 256], 32)
    torch.manual_seed(0)
    coarse = FPN([32, 64, 128, 256], 32, out_levels=(1, 2, 3))
    torch.manual_seed(0)
    fine = FPN([32, 64, 128, 256], 32, out_levels=(0, 1, 2))
    features = [torch.randn(2, c, 56 // 2 ** i, 112 // 2 ** i) for i, c in enumerate([32, 64, 128, 256])]
    reference = full(features)
    for pyramid, kept in ((coarse, (1, 2, 3)), (fine, (0, 1, 2))):
        levels = pyramid(features)
        assert [i for i, level in enumerate(levels) if level is not None] == list(kept)
        for i in kept:
            assert torch.equal(levels[i], reference[i])
    assert not any(k.startswith(("lateral.0.", "output.0.")) for k in coarse.state_dict())
    assert "lateral.3.weight" in fine.state_dict() and "output.3.0.weight" not in fine.state_dict()

    # A checkpoint of the full pyramid (written before the pruning): loads into the pruned one, cannot resume.
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in full.state_dict().items()}}, path)
    load_model_weights(coarse, str(path))
    with pytest.raises(CheckpointMismatchError, match=r"(?s)--resume checkpoint .*lateral\.0\..*new run"):
        check_resume_fits(coarse, str(path))
    with pytest.raises(ValueError, match="out_levels"):
        FPN([32, 64], 32, out_levels=(2,))


def test_the_demo_model_builds_no_weight_its_heads_never_read():
    """configs/demo_synthetic.py: deformable box heads (no positional level embedding) and a pyramid per query
    head with only the levels it reads."""
    from perception.config import load_config

    cfg = parse_config(load_config(os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs",
                                                "demo_synthetic.py")))
    model = build_model(cfg.model, tuple(cfg.input_size))
    assert model.heads["obstacles"].memory.level_embed is None and model.heads["lights"].memory.level_embed is None
    assert model.own_necks["obstacles"].out_levels == (1, 2, 3) == model.heads["obstacles"].input_levels()
    assert model.own_necks["lanes"].out_levels == (0, 1, 2, 3)  # the marking map reads stride 4
    assert model.own_necks["lights"].out_levels == (0, 1, 2)
