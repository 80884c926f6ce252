"""The per-step learning-rate schedule (warmup, then a cosine or linear decay), AdamW's betas, their config checks."""

import math

import pytest
from torch import nn

from perception.config import ConfigError, OptimizerConfig, SchedulerConfig, load_config, parse_config
from perception.training.optim import build_optimizer, warmup_then_decay


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_warmup_starts_low_and_reaches_the_base_lr(decay):
    factor = warmup_then_decay(SchedulerConfig(warmup_steps=10, warmup_ratio=0.1, min_lr_ratio=0.05, decay=decay), 110)
    assert factor(0) == pytest.approx(0.1)
    assert factor(5) == pytest.approx(0.55)  # linear warmup
    assert factor(10) == pytest.approx(1.0)
    assert factor(110) == pytest.approx(0.05)  # the end of the decay is min_lr_ratio
    assert factor(500) == pytest.approx(0.05)  # and it stays there past total_steps
    values = [factor(step) for step in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:])), "the decay must not rise"


def test_cosine_and_linear_differ_in_shape_not_in_their_ends():
    cosine = warmup_then_decay(SchedulerConfig(warmup_steps=0, min_lr_ratio=0.0, decay="cosine"), 100)
    linear = warmup_then_decay(SchedulerConfig(warmup_steps=0, min_lr_ratio=0.0, decay="linear"), 100)
    assert cosine(25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))  # 0.854
    assert linear(25) == pytest.approx(0.75)
    assert linear(50) == pytest.approx(cosine(50)) == pytest.approx(0.5)
    assert linear(75) == pytest.approx(0.25) and cosine(75) == pytest.approx(0.146, abs=1e-3)
    # The same area under both: the same sum of step sizes, spent at different times.
    assert sum(map(linear, range(100))) == pytest.approx(sum(map(cosine, range(100))), rel=0.02)


def test_scheduler_steps_the_optimizer_groups_with_the_backbone_multiplier():
    model = nn.ModuleDict({"backbone": nn.Linear(2, 2), "head": nn.Linear(2, 2)})
    built = build_optimizer(model, OptimizerConfig(lr=1e-3, backbone_lr_mult=0.1),
                            SchedulerConfig(warmup_steps=0, min_lr_ratio=0.0, decay="linear"), total_steps=4)
    optimizer, schedule = built["optimizer"], built["lr_scheduler"]["scheduler"]
    lrs = {group["name"]: group["lr"] for group in optimizer.param_groups}
    assert lrs["backbone"] == pytest.approx(1e-4) and lrs["heads"] == pytest.approx(1e-3)
    assert {g["name"]: g["weight_decay"] for g in optimizer.param_groups}["heads_no_decay"] == 0.0  # biases
    for _ in range(2):
        optimizer.step()
        schedule.step()
    assert {g["name"]: g["lr"] for g in optimizer.param_groups}["heads"] == pytest.approx(5e-4)


@pytest.mark.parametrize("options, message", [
    ({"scheduler.decay": "step"}, "scheduler.decay must be one of"),
    ({"scheduler.decay": "exponential"}, "scheduler.decay"),
    ({"scheduler.min_lr_ratio": 1.5}, "scheduler.min_lr_ratio"),
    ({"scheduler.warmup_ratio": -0.1}, "scheduler.warmup_ratio"),
])
def test_bad_schedule_values_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(load_config("configs/demo_synthetic.py", options))


def test_adam_betas_reach_every_parameter_group():
    model = nn.ModuleDict({"backbone": nn.Linear(2, 2), "head": nn.Linear(2, 2)})
    built = build_optimizer(model, OptimizerConfig(lr=1e-3, betas=(0.9, 0.99)), SchedulerConfig(), total_steps=4)
    assert {tuple(group["betas"]) for group in built["optimizer"].param_groups} == {(0.9, 0.99)}


@pytest.mark.parametrize("betas", [[0.9, 1.0], [0.9], [0.9, -0.1], [0.9, "0.99"], 0.99])
def test_bad_adam_betas_are_config_errors(betas):
    with pytest.raises(ConfigError, match="optimizer.betas must be two numbers in"):
        parse_config(load_config("configs/demo_synthetic.py", {"optimizer.betas": betas}))


def test_head_betas_give_that_head_groups_of_its_own():
    model = nn.ModuleDict({"backbone": nn.Linear(2, 2),
                           "heads": nn.ModuleDict({"lanes": nn.Linear(2, 2), "obstacles": nn.Linear(2, 2)})})
    built = build_optimizer(model, OptimizerConfig(lr=1e-3, betas=(0.9, 0.99), head_betas={"lanes": [0.9, 0.999]}),
                            SchedulerConfig(), total_steps=4)
    groups = {group["name"]: group for group in built["optimizer"].param_groups}
    assert set(groups) == {"backbone", "backbone_no_decay", "heads", "heads_no_decay", "heads.lanes",
                           "heads.lanes_no_decay"}
    assert groups["heads.lanes"]["betas"] == (0.9, 0.999) and groups["heads"]["betas"] == (0.9, 0.99)
    assert groups["backbone"]["betas"] == (0.9, 0.99)
    lanes = {id(p) for p in model["heads"]["lanes"].parameters()}
    assert {id(p) for p in groups["heads.lanes"]["params"] + groups["heads.lanes_no_decay"]["params"]} == lanes


@pytest.mark.parametrize("head_betas, message", [
    ({"lane": [0.9, 0.999]}, "optimizer.head_betas has keys \\['lane'\\], which are not heads"),
    ({"lanes": [0.9, 1.5]}, "optimizer.head_betas.lanes must be two numbers in"),
    ([0.9, 0.999], "optimizer.head_betas must map head names to betas"),
])
def test_bad_head_betas_are_config_errors(head_betas, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(load_config("configs/demo_synthetic.py", {"optimizer.head_betas": head_betas}))
