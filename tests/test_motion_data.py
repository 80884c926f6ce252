"""Forecasting samples from nuScenes-format data through the devkit's PredictHelper and NuScenesMap."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from nuscenes.nuscenes import NuScenes
from nuscenes.prediction import PredictHelper
from nuscenes.prediction.helper import convert_local_coords_to_global

from perception.data.label_cache import StaleCacheError
from perception.data.motion_cache import build_motion_cache, load_motion_cache
from perception.data.motion_samples import (
    MotionDataSettings,
    extract_motion_samples,
    motion_tokens_of_split,
    to_agent_frame,
    to_global_frame,
)

SETTINGS = MotionDataSettings()


@pytest.fixture(scope="module")
def nusc(motion_dataset):
    return NuScenes("v1.0-trainval", motion_dataset, verbose=False)


@pytest.fixture(scope="module")
def samples(nusc, motion_dataset):
    tokens = motion_tokens_of_split(motion_dataset, "v1.0-trainval", "synthetic_val")
    return tokens, extract_motion_samples(nusc, tokens, SETTINGS)


def test_prediction_split_lists_moving_vehicles_with_a_full_future(nusc, motion_dataset):
    with open(os.path.join(motion_dataset, "maps", "prediction", "prediction_scenes.json")) as f:
        per_scene = json.load(f)
    assert set(per_scene) == {s["name"] for s in nusc.scene}
    helper = PredictHelper(nusc)
    tokens = motion_tokens_of_split(motion_dataset, "v1.0-trainval", "synthetic_train")
    assert len(tokens) > 100
    for token in tokens[::25]:
        instance, sample = token.split("_")
        assert nusc.get("category", nusc.get("instance", instance)["category_token"])["name"].startswith("vehicle.")
        assert helper.get_future_for_agent(instance, sample, 6, in_agent_frame=False).shape == (12, 2)
        assert np.isfinite(helper.get_velocity_for_agent(instance, sample))
    val = set(motion_tokens_of_split(motion_dataset, "v1.0-trainval", "synthetic_val"))
    assert val and not val & set(tokens)


def test_samples_are_in_the_devkit_agent_frame(nusc, samples):
    tokens, arrays = samples
    helper = PredictHelper(nusc)
    for i in range(0, len(tokens), 17):
        instance, sample = tokens[i].split("_")
        expected = helper.get_future_for_agent(instance, sample, 6, in_agent_frame=True)
        np.testing.assert_allclose(arrays["future"][i], expected, atol=1e-4)
        past = helper.get_past_for_agent(instance, sample, 2, in_agent_frame=True)[::-1]  # oldest first
        np.testing.assert_allclose(arrays["history"][i, -len(past):], past, atol=1e-4)
        assert arrays["history_valid"][i].sum() == len(past)
        # Our frame maths and the devkit's agree both ways.
        global_future = helper.get_future_for_agent(instance, sample, 6, in_agent_frame=False)
        translation, rotation = arrays["translation"][i], arrays["rotation"][i]
        np.testing.assert_allclose(to_global_frame(arrays["future"][i], translation, rotation), global_future,
                                   atol=1e-3)
        np.testing.assert_allclose(convert_local_coords_to_global(arrays["future"][i].astype(np.float64),
                                                                  translation, rotation), global_future, atol=1e-3)
        np.testing.assert_allclose(to_agent_frame(global_future, translation, rotation), expected, atol=1e-4)
    # Agents head along +y: the future moves forward, not sideways.
    moving = arrays["future"][:, -1, 1] > 5
    assert moving.mean() > 0.8
    assert np.abs(arrays["future"][moving, 0, 0]).max() < 1.0


def test_lane_tokens_follow_the_agents_lane(samples):
    _, arrays = samples
    assert arrays["lanes_valid"].sum(1).min() >= 4
    points = arrays["lanes"][..., :2].reshape(len(arrays["lanes"]), -1, 2)
    valid = np.repeat(arrays["lanes_valid"], SETTINGS.lane_points, axis=1) > 0
    distance = np.where(valid, np.linalg.norm(points, axis=-1), np.inf).min(1)
    # Vehicles drive on lane centrelines: a lane point within the 2 m discretisation of the agent.
    assert np.median(distance) < 1.5 and distance.max() < 3.0
    # The nearest lane runs the way the agent heads (+y), i.e. direction (cos, sin) ~ (0, 1).
    flat = arrays["lanes"].reshape(len(arrays["lanes"]), -1, 4)
    nearest = flat[np.arange(len(flat)), np.where(valid, np.linalg.norm(points, axis=-1), np.inf).argmin(1)]
    assert np.median(nearest[:, 3]) > 0.95


def test_motion_cache_roundtrip_and_staleness(motion_dataset, tmp_path):
    build_motion_cache(motion_dataset, "v1.0-trainval", "synthetic_val", SETTINGS, True, str(tmp_path), verbose=False)
    data = load_motion_cache(motion_dataset, "v1.0-trainval", "synthetic_val", SETTINGS, True, str(tmp_path))
    assert len(data["tokens"]) == len(data["future"]) > 0
    with pytest.raises(StaleCacheError, match="motion_synthetic_val"):
        load_motion_cache(motion_dataset, "v1.0-trainval", "synthetic_val", MotionDataSettings(max_lanes=8), True,
                          str(tmp_path))


def test_official_prediction_split_names_go_through_the_devkit(tmp_path):
    from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes

    # A v1.0-mini-like layout: the devkit's mini_train / mini_val select these scene names.
    spec = SyntheticSpec(scenes=3, samples_per_scene=20, cameras=0, val_scenes=1, seed=9, version="v1.0-mini",
                         scene_names=("scene-0061", "scene-0553", "scene-0103"))
    write_synthetic_nuscenes(str(tmp_path), spec)
    train = motion_tokens_of_split(str(tmp_path), "v1.0-mini", "mini_train")
    val = motion_tokens_of_split(str(tmp_path), "v1.0-mini", "mini_val")
    with open(tmp_path / "maps" / "prediction" / "prediction_scenes.json") as f:
        per_scene = json.load(f)
    assert train == per_scene["scene-0061"] + per_scene["scene-0553"] and train
    assert val == per_scene["scene-0103"] and val
    with pytest.raises(FileNotFoundError, match="prediction_scenes.json"):
        motion_tokens_of_split(str(tmp_path / "nowhere"), "v1.0-mini", "mini_val")
