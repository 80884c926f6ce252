"""The forecaster: causal decoding, autoregressive = teacher-forced, masking, WTA loss, metrics vs devkit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nuscenes.eval.prediction.data_classes import Prediction
from nuscenes.eval.prediction.metrics import MinADEK, MinFDEK, MissRateTopK, RowMean

from perception.losses.motion_loss import MotionCriterion
from perception.metrics.trajectory import TrajectoryMetrics
from perception.models.trajectory_transformer import TrajectoryTransformer

B, H, T, M, P, K = 3, 4, 12, 6, 10, 4


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    history = torch.cumsum(torch.randn(B, H, 2, generator=g), dim=1) - 10
    history_valid = torch.ones(B, H)
    history_valid[0, :2] = 0  # a young track
    lanes = torch.randn(B, M, P, 4, generator=g) * 5
    lanes_valid = torch.ones(B, M)
    lanes_valid[1, 3:] = 0
    return history, history_valid, lanes, lanes_valid


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TrajectoryTransformer(past_steps=H, future_steps=T, lane_points=P, dim=32, num_heads=4, ffn_dim=64,
                                 num_modes=K).eval()


def test_shapes_and_probabilities(model):
    trajectories, probabilities = model.forecast(*_inputs())
    assert trajectories.shape == (B, K, T, 2) and probabilities.shape == (B, K)
    assert torch.allclose(probabilities.sum(-1), torch.ones(B))


def test_causal_decoder_later_inputs_do_not_change_earlier_outputs(model):
    inputs = _inputs()
    future = torch.randn(B, T, 2) * 5
    out, logits = model(*inputs, future)
    changed = future.clone()
    changed[:, 7:] += 25.0  # decoder inputs from step 8 on
    out_changed, logits_changed = model(*inputs, changed)
    assert torch.allclose(out[:, :, :8], out_changed[:, :, :8], atol=1e-5)
    assert not torch.allclose(out[:, :, 8:], out_changed[:, :, 8:], atol=1e-3)
    assert torch.allclose(logits, logits_changed, atol=1e-5)


def test_autoregressive_decoding_equals_teacher_forcing_on_its_own_outputs(model):
    inputs = _inputs(1)
    rollout, probabilities = model.forecast(*inputs)
    teacher_forced, logits = model(*inputs, rollout)  # each mode fed its own rollout
    assert torch.allclose(rollout, teacher_forced, atol=1e-4)
    assert torch.allclose(probabilities, logits.softmax(-1), atol=1e-6)


def test_padded_lanes_and_missing_history_are_ignored(model):
    history, history_valid, lanes, lanes_valid = _inputs(2)
    reference, _ = model.forecast(history, history_valid, lanes, lanes_valid)
    lanes2, history2 = lanes.clone(), history.clone()
    lanes2[1, 3:] = 1000.0  # padded lane slots of agent 1
    history2[0, :2] = -500.0  # missing past of agent 0
    changed, _ = model.forecast(history2, history_valid, lanes2, lanes_valid)
    assert torch.allclose(reference, changed, atol=1e-4)


def test_relaxed_winner_takes_all_weights_the_best_mode(model):
    from perception.losses.motion_loss import LOSING_MODES_WEIGHT, winner_takes_all

    torch.manual_seed(0)
    inputs = _inputs(3)
    future = torch.cumsum(torch.ones(B, T, 2), dim=1)
    losses = MotionCriterion()(model.train(), inputs, future, torch.ones(B, T))
    model.eval()
    assert set(losses) == {"motion_reg", "motion_reg_self_fed", "motion_cls"}
    assert all(torch.isfinite(v) for v in losses.values())
    # By hand: per-mode mean smooth L1 (network units), 1 - w on the closest mode, w shared by the rest.
    trajectories = torch.randn(B, K, T, 2) * 3 + future[:, None]
    per_mode = torch.nn.functional.smooth_l1_loss(trajectories / 10, future[:, None].expand_as(trajectories) / 10,
                                                  reduction="none").sum(-1).mean(-1)
    best = (trajectories - future[:, None]).norm(dim=-1).mean(-1).argmin(1)
    expected = torch.stack([(1 - LOSING_MODES_WEIGHT) * per_mode[b, best[b]]
                            + LOSING_MODES_WEIGHT / (K - 1) * (per_mode[b].sum() - per_mode[b, best[b]])
                            for b in range(B)]).mean()
    loss, chosen = winner_takes_all(trajectories, future, torch.ones(B, T))
    assert torch.equal(chosen, best)
    assert torch.allclose(loss, expected, atol=1e-6)


def test_trajectory_metrics_agree_with_the_devkit():
    rng = np.random.default_rng(0)
    n, modes = 40, 6
    truth = np.cumsum(rng.normal(1.0, 0.5, size=(n, T, 2)), axis=1)
    trajectories = truth[:, None] + rng.normal(0, 1.5, size=(n, modes, T, 2)) * rng.uniform(0.2, 2, (n, modes, 1, 1))
    probabilities = rng.dirichlet(np.ones(modes), size=n)
    ours = TrajectoryMetrics(k=5)
    ours.update(trajectories[:15], probabilities[:15], truth[:15])
    ours.update(trajectories[15:], probabilities[15:], truth[15:])
    ours = ours.compute()
    devkit = {"minADE_5": MinADEK([5], [RowMean()]), "minFDE_5": MinFDEK([5], [RowMean()]),
              "MissRate_2_5": MissRateTopK([5], [RowMean()], tolerance=2.0)}
    for name, metric in devkit.items():
        values = [metric(truth[i], Prediction("i", "s", trajectories[i], probabilities[i]))[0][0] for i in range(n)]
        assert ours[name] == pytest.approx(float(np.mean(values)), abs=1e-9), name
    assert 0 < ours["MissRate_2_5"] < 1  # the case exercises both hits and misses
