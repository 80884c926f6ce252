"""model.trunk_gradient_scale and model.trunk_gradient_norm: a head's gradient into the shared trunk is scaled or
normalised in training, nothing else."""

from __future__ import annotations

import pytest
import torch

from perception.build import build_model
from perception.config import ConfigError, parse_config
from perception.models.gradient_scale import normalise_gradient, scale_gradient
from tests.conftest import TINY_MODEL, experiment_dict

LIGHT_HEAD = dict(dim=32, num_queries=8, num_layers=1, num_heads=2, ffn_dim=64)


def two_head_model(scale: dict, norm: float | None = None) -> tuple[torch.nn.Module, object]:
    model_cfg = dict(TINY_MODEL, heads=dict(drivable=dict(channels=32, num_classes=2), lights=LIGHT_HEAD),
                     trunk_gradient_scale=scale, trunk_gradient_norm=norm)
    cfg = parse_config(experiment_dict("/unused", model=model_cfg,
                                       bdd100k=dict(data_root="/unused", sample_fraction=0.5)))
    torch.manual_seed(0)
    return build_model(cfg.model, tuple(cfg.input_size)), cfg


def trunk_gradient(model: torch.nn.Module, images: torch.Tensor, output: str, weight: float = 1.0) -> torch.Tensor:
    """The gradient of one head's output sum (times ``weight``) on the backbone's first weights."""
    model.zero_grad(set_to_none=True)
    (weight * model(images)[output].float().sum()).backward()
    return model.backbone.body.patch_embed.proj.weight.grad.clone()


def test_identity_forward_and_scaled_backward():
    x = torch.randn(3, 4, requires_grad=True)
    y = scale_gradient(x, 0.25)
    assert torch.equal(y, x)
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full_like(x, 0.25))
    assert not scale_gradient(x, 0.0).requires_grad  # 0: the trunk gets nothing from this head
    assert scale_gradient(x, 1.0) is x


def test_only_the_named_heads_gradient_into_the_trunk_is_scaled():
    images = torch.randn(2, 3, 224, 448)
    plain, _ = two_head_model({})
    scaled, _ = two_head_model({"lights": 0.1})
    scaled.load_state_dict(plain.state_dict())
    plain.train(), scaled.train()
    light_plain = trunk_gradient(plain, images, "lights.logits")
    light_scaled = trunk_gradient(scaled, images, "lights.logits")
    assert light_plain.abs().max() > 0
    assert torch.allclose(light_scaled, 0.1 * light_plain, rtol=1e-3, atol=1e-6)
    # the light head's own weights and the other head's trunk gradient are untouched
    head_weight = next(n for n, _ in scaled.named_parameters() if n.startswith("heads.lights."))
    assert torch.allclose(scaled.get_parameter(head_weight).grad, plain.get_parameter(head_weight).grad,
                          rtol=1e-3, atol=1e-6)
    assert torch.allclose(trunk_gradient(scaled, images, "drivable.logits"),
                          trunk_gradient(plain, images, "drivable.logits"), rtol=1e-3, atol=1e-6)


def test_inference_is_unchanged():
    images = torch.randn(1, 3, 224, 448)
    plain, _ = two_head_model({})
    scaled, _ = two_head_model({"lights": 0.0})
    scaled.load_state_dict(plain.state_dict())
    with torch.no_grad():
        a, b = plain.eval()(images), scaled.eval()(images)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_normalised_gradient_has_the_set_norm_over_all_levels_and_keeps_its_direction():
    a, b = torch.randn(2, 3, 4, 4, requires_grad=True), torch.randn(2, 3, 2, 2, requires_grad=True)
    x, y = normalise_gradient([a, b], 2.0)
    assert torch.equal(x, a) and torch.equal(y, b)
    (3.0 * x.sum() + 4.0 * y.sum()).backward()
    total = torch.sqrt((a.grad ** 2).sum() + (b.grad ** 2).sum())
    assert abs(total.item() - 2.0) < 1e-5
    assert torch.allclose(b.grad / a.grad.flatten()[0], torch.full_like(b, 4.0 / 3.0))  # one factor for all levels
    c = torch.randn(3, requires_grad=True)
    (0.0 * normalise_gradient([c], 1.0)[0].sum()).backward()
    assert torch.equal(c.grad, torch.zeros(3))  # nothing to normalise: stays zero, no NaN


def test_with_a_trunk_gradient_norm_the_loss_size_no_longer_sets_the_trunk_step():
    """A head whose loss is 100x larger sends the trunk the same gradient; its own weights still see 100x."""
    images = torch.randn(2, 3, 224, 448)
    model, _ = two_head_model({}, norm=1.0)
    model.train()
    small = trunk_gradient(model, images, "lights.logits")
    head_weight = next(p for n, p in model.named_parameters() if n.startswith("heads.lights."))
    own_small = head_weight.grad.clone()
    large = trunk_gradient(model, images, "lights.logits", weight=100.0)
    assert small.abs().max() > 0
    assert torch.allclose(large, small, rtol=1e-4, atol=1e-5 * small.abs().max().item())
    assert torch.allclose(head_weight.grad, 100.0 * own_small, rtol=1e-4, atol=1e-7)
    plain, _ = two_head_model({})
    plain.load_state_dict(model.state_dict())
    plain.train()
    reference = trunk_gradient(plain, images, "lights.logits")  # the same direction as without the norm
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), small.flatten(), dim=0)
    assert cosine.item() > 0.9999
    with torch.no_grad():  # inference: the same outputs
        a, b = plain.eval()(images), model.eval()(images)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_with_a_norm_the_trunk_gradient_scale_weighs_the_normalised_gradient():
    images = torch.randn(2, 3, 224, 448)
    normalised, _ = two_head_model({}, norm=1.0)
    weighted, _ = two_head_model({"lights": 0.5}, norm=1.0)
    weighted.load_state_dict(normalised.state_dict())
    normalised.train(), weighted.train()
    full = trunk_gradient(normalised, images, "lights.logits")
    assert torch.allclose(trunk_gradient(weighted, images, "lights.logits"), 0.5 * full, rtol=1e-4,
                          atol=1e-5 * full.abs().max().item())


@pytest.mark.parametrize("norm", [0.0, -1.0, "one", True])
def test_bad_trunk_gradient_norm_is_a_config_error(norm):
    with pytest.raises(ConfigError, match="trunk_gradient_norm"):
        two_head_model({}, norm=norm)


@pytest.mark.parametrize("scale, message", [({"obstacles": 0.5}, "not an enabled head"),
                                            ({"lights": -1.0}, r"in \[0, 10\]"),
                                            ({"lights": "low"}, r"in \[0, 10\]")])
def test_bad_scales_are_config_errors(scale, message):
    with pytest.raises(ConfigError, match=message):
        two_head_model(scale)


def large_light_gradients(model: torch.nn.Module) -> None:
    """Gradients as the light head's GIoU spikes leave them: large on the light head, small elsewhere."""
    for name, p in model.named_parameters():
        p.grad = torch.full_like(p, 10.0 if name.startswith("heads.lights.") else 1e-4)


def test_clip_per_part_clips_the_trunk_and_each_head_on_its_own():
    from perception.training.assembly import build_system

    _, cfg = two_head_model({})
    cfg.optimizer.clip_per_part = True
    system = build_system(cfg)
    large_light_gradients(system.model)
    small = {name: p.grad.clone() for name, p in system.model.named_parameters()
             if not name.startswith("heads.lights.")}
    system.configure_gradient_clipping(None, gradient_clip_val=1.0)
    lights = [p.grad for name, p in system.model.named_parameters() if name.startswith("heads.lights.")]
    assert abs(torch.sqrt(sum((g ** 2).sum() for g in lights)).item() - 1.0) < 1e-4
    # under the clip on their own: unchanged (a global clip would have scaled them down with the light head)
    for name, p in system.model.named_parameters():
        if name in small:
            assert torch.equal(p.grad, small[name]), name


def test_clip_per_part_with_a_list_clips_only_those_heads_on_their_own():
    from perception.training.assembly import build_system

    _, cfg = two_head_model({})
    cfg.optimizer.clip_per_part = ["drivable"]
    system = build_system(cfg)
    large_light_gradients(system.model)
    drivable = {name: p.grad.clone() for name, p in system.model.named_parameters()
                if name.startswith("heads.drivable.")}
    system.configure_gradient_clipping(None, gradient_clip_val=1.0)
    # the trunk and the light head are one part: clipped together to 1.0, the trunk scaled down with it
    together = [p.grad for name, p in system.model.named_parameters() if name not in drivable]
    assert abs(torch.sqrt(sum((g ** 2).sum() for g in together)).item() - 1.0) < 1e-4
    trunk = next(p.grad for name, p in system.model.named_parameters() if not name.startswith("heads."))
    assert trunk.abs().max().item() < 1e-4 / 100
    for name, p in system.model.named_parameters():  # the listed head: on its own, under the clip
        if name in drivable:
            assert torch.equal(p.grad, drivable[name]), name


@pytest.mark.parametrize("value, message", [(["obstacle"], "not heads"), ("lights", "list of head names")])
def test_bad_clip_per_part_is_a_config_error(value, message):
    raw = experiment_dict("/unused", optimizer=dict(lr=1e-3, clip_per_part=value))
    raw["trainer"].update(gradient_clip_val=1.0)
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_clip_per_part_may_list_a_disabled_head():
    # the demo config lists the obstacle head; bench variants that turn it off inherit the list
    raw = experiment_dict("/unused", optimizer=dict(lr=1e-3, clip_per_part=["obstacles", "drivable"]),
                          model=dict(TINY_MODEL, heads=dict(drivable=dict(channels=32, num_classes=2), obstacles=None)))
    raw["trainer"].update(gradient_clip_val=1.0)
    cfg = parse_config(raw)
    assert [task.name for task in cfg.model.heads.enabled] == ["drivable"]
    assert cfg.optimizer.clip_per_part == ["obstacles", "drivable"]


def test_clip_per_part_needs_a_norm_clip():
    with pytest.raises(ConfigError, match="gradient_clip_val"):
        parse_config(experiment_dict("/unused", optimizer=dict(lr=1e-3, clip_per_part=True)))
    by_value = experiment_dict("/unused", optimizer=dict(lr=1e-3, clip_per_part=True))
    by_value["trainer"].update(gradient_clip_val=1.0, gradient_clip_algorithm="value")
    with pytest.raises(ConfigError, match="gradient_clip_algorithm"):
        parse_config(by_value)
