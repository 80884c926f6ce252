"""The weights' moving average (perception.training.ema) and which weights a checkpoint loads."""

import pytest
import torch
from torch import nn

from perception.config import ConfigError, parse_config
from perception.core.checkpoint import load_model_weights, model_weights
from perception.training.ema import ema_decay_at, frozen_copy, update_ema
from tests.conftest import experiment_dict


def test_decay_ramps_up_then_holds_at_the_configured_value():
    assert ema_decay_at(0, 0.999) == pytest.approx(0.1)  # the first update mostly takes the new weights
    assert ema_decay_at(90, 0.999) == pytest.approx(0.91)
    assert ema_decay_at(100_000, 0.999) == 0.999
    values = [ema_decay_at(t, 0.99) for t in range(2000)]
    assert values == sorted(values) and max(values) == 0.99


def test_update_moves_the_average_towards_the_weights_and_copies_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    average = frozen_copy(model)
    assert not any(p.requires_grad for p in average.parameters()) and not average.training
    before = average[0].weight.clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)
        model[1].running_mean.fill_(5.0)
    update_ema(average, model, decay=0.75)
    assert torch.allclose(average[0].weight, 0.75 * before + 0.25 * model[0].weight)
    assert torch.equal(average[1].running_mean, model[1].running_mean)


def test_checkpoints_load_the_average_for_inference_and_the_raw_weights_for_resume(tmp_path):
    model = nn.Linear(2, 2)
    raw = {f"model.{k}": v for k, v in model.state_dict().items()}
    averaged = {f"ema_model.{k}": torch.full_like(v, 7.0) for k, v in model.state_dict().items()}
    assert model_weights(raw)["weight"] is raw["model.weight"]
    assert torch.equal(model_weights(raw | averaged)["weight"], torch.full((2, 2), 7.0))
    assert model_weights(raw | averaged, prefer_average=False)["weight"] is raw["model.weight"]
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": raw | averaged}, path)
    load_model_weights(model, str(path))
    assert torch.equal(model.weight, torch.full((2, 2), 7.0))


def test_decay_outside_zero_to_one_is_a_config_error():
    with pytest.raises(ConfigError, match="optimizer.ema_decay"):
        parse_config(experiment_dict("unused", optimizer=dict(lr=1e-3, ema_decay=1.0)))
