"""Forecasting samples extracted from nuScenes with the devkit's PredictHelper and NuScenesMap.

One sample = one agent at one keyframe (the prediction challenge's "<instance>_<sample>" token).
Everything is in the devkit's *agent frame* (``convert_global_coords_to_local``): origin at the
agent's centre at the current keyframe, +y along its heading, +x to its right, metres.

Arrays per sample (H = past keyframes, T = future keyframes, M = lane segments, P = points each):
  history  [H, 2]     past positions, oldest first; rows of missing past are zero
  history_valid [H]   1 where the past position exists
  future   [T, 2]     ground-truth future positions (training target)
  future_valid [T]
  lanes    [M, P, 4]  lane centreline segments near the agent: (x, y, cos, sin of the lane direction)
  lanes_valid [M]
  translation [3], rotation [4]  the agent's global pose (to map predictions back to the global frame)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pyquaternion import Quaternion

from perception.data.splits import scenes_of_split

FREQUENCY_HZ = 2  # nuScenes keyframes


@dataclass(frozen=True)
class MotionDataSettings:
    past_seconds: float = 2.0
    future_seconds: float = 6.0
    map_radius: float = 50.0  # lanes with a point within this distance of the agent
    max_lanes: int = 32  # lane segments kept (nearest first)
    lane_points: int = 10  # points per segment
    lane_resolution: float = 2.0  # metres between discretised lane points

    @property
    def past_steps(self) -> int:
        return int(round(self.past_seconds * FREQUENCY_HZ))

    @property
    def future_steps(self) -> int:
        return int(round(self.future_seconds * FREQUENCY_HZ))


def motion_tokens_of_split(data_root: str, version: str, split: str) -> list[str]:
    """"<instance>_<sample>" tokens of a split from ``maps/prediction/prediction_scenes.json``.

    Official prediction splits (train, train_val, val, mini_train, mini_val) go through the
    devkit's ``get_prediction_challenge_split``; custom splits select scenes from splits.json.
    """
    import json
    import os

    from nuscenes.eval.prediction.splits import get_prediction_challenge_split

    path = os.path.join(data_root, "maps", "prediction", "prediction_scenes.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: real nuScenes ships it in the map expansion / prediction "
                                "download (nuScenes-prediction); synthetic data writes it")
    if split in {"train", "train_val", "val", "mini_train", "mini_val"}:
        return get_prediction_challenge_split(split, dataroot=data_root)
    with open(path) as f:
        per_scene = json.load(f)
    return [token for scene in scenes_of_split(data_root, version, split) for token in per_scene.get(scene, [])]


def agent_yaw_to_local(rotation) -> float:
    """Angle that rotates global vectors into the devkit's agent frame (agent heading -> +y)."""
    yaw = Quaternion(rotation).yaw_pitch_roll[0]
    return math.pi / 2 - yaw


def to_agent_frame(points_xy: np.ndarray, translation, rotation) -> np.ndarray:
    """Global [N, 2] -> agent frame [N, 2] (same maths as the devkit's convert_global_coords_to_local)."""
    angle = agent_yaw_to_local(rotation)
    c, s = math.cos(angle), math.sin(angle)
    shifted = np.asarray(points_xy, dtype=np.float64) - np.asarray(translation[:2])
    return shifted @ np.array([[c, s], [-s, c]])


def to_global_frame(points_xy: np.ndarray, translation, rotation) -> np.ndarray:
    """Agent frame [..., 2] -> global [..., 2]."""
    angle = agent_yaw_to_local(rotation)
    c, s = math.cos(angle), math.sin(angle)
    return np.asarray(points_xy, dtype=np.float64) @ np.array([[c, -s], [s, c]]) + np.asarray(translation[:2])


class LaneSegments:
    """All lane centrelines of one map, discretised once (``NuScenesMap.discretize_lanes``) and cut
    into fixed-length segments [S, P, 3] of global (x, y, yaw)."""

    def __init__(self, nusc_map, settings: MotionDataSettings):
        tokens = [r["token"] for r in nusc_map.lane] + [r["token"] for r in nusc_map.lane_connector]
        discretised = nusc_map.discretize_lanes(tokens, settings.lane_resolution)
        points = settings.lane_points
        segments = []
        for poses in discretised.values():
            poses = np.asarray(poses, dtype=np.float64)
            if len(poses) < 2:
                continue
            # Overlap consecutive segments by one point so that no stretch of lane is missed.
            for start in range(0, max(len(poses) - 1, 1), points - 1):
                piece = poses[start:start + points]
                if len(piece) < points:  # pad a short tail by repeating its last pose
                    piece = np.concatenate([piece, np.repeat(piece[-1:], points - len(piece), axis=0)])
                segments.append(piece)
        self.segments = np.stack(segments) if segments else np.zeros((0, points, 3))
        self.settings = settings

    def near(self, translation, rotation) -> tuple[np.ndarray, np.ndarray]:
        """(lanes [M, P, 4] in the agent frame, valid [M]) for the nearest segments within the radius."""
        s = self.settings
        lanes = np.zeros((s.max_lanes, s.lane_points, 4), dtype=np.float32)
        valid = np.zeros(s.max_lanes, dtype=np.float32)
        if not len(self.segments):
            return lanes, valid
        distance = np.linalg.norm(self.segments[..., :2] - np.asarray(translation[:2]), axis=-1).min(axis=1)
        order = np.argsort(distance)
        order = order[distance[order] <= s.map_radius][: s.max_lanes]
        angle = agent_yaw_to_local(rotation)
        for row, index in enumerate(order):
            segment = self.segments[index]
            lanes[row, :, :2] = to_agent_frame(segment[:, :2], translation, rotation)
            lanes[row, :, 2] = np.cos(segment[:, 2] + angle)
            lanes[row, :, 3] = np.sin(segment[:, 2] + angle)
            valid[row] = 1.0
        return lanes, valid


def extract_motion_samples(nusc, tokens: list[str], settings: MotionDataSettings, use_map: bool = True) -> dict:
    """Arrays (see the module docstring) for ``tokens``, stacked along a first axis of len(tokens)."""
    from nuscenes.map_expansion.map_api import NuScenesMap
    from nuscenes.prediction import PredictHelper

    helper = PredictHelper(nusc)
    lane_maps: dict[str, LaneSegments] = {}
    n, past, future = len(tokens), settings.past_steps, settings.future_steps
    out = {
        "history": np.zeros((n, past, 2), np.float32), "history_valid": np.zeros((n, past), np.float32),
        "future": np.zeros((n, future, 2), np.float32), "future_valid": np.zeros((n, future), np.float32),
        "lanes": np.zeros((n, settings.max_lanes, settings.lane_points, 4), np.float32),
        "lanes_valid": np.zeros((n, settings.max_lanes), np.float32),
        "translation": np.zeros((n, 3), np.float64), "rotation": np.zeros((n, 4), np.float64),
    }
    for i, token in enumerate(tokens):
        instance, sample = token.split("_")
        annotation = helper.get_sample_annotation(instance, sample)
        translation, rotation = annotation["translation"], annotation["rotation"]
        out["translation"][i], out["rotation"][i] = translation, rotation
        # The devkit returns the past newest first and excludes the current position.
        history = helper.get_past_for_agent(instance, sample, settings.past_seconds, in_agent_frame=True)[:past]
        if len(history):
            out["history"][i, past - len(history):] = history[::-1]
            out["history_valid"][i, past - len(history):] = 1.0
        gt = helper.get_future_for_agent(instance, sample, settings.future_seconds, in_agent_frame=True)[:future]
        out["future"][i, : len(gt)] = gt
        out["future_valid"][i, : len(gt)] = 1.0
        if use_map:
            map_name = helper.get_map_name_from_sample_token(sample)
            if map_name not in lane_maps:
                nusc_map = NuScenesMap(dataroot=nusc.dataroot, map_name=map_name)
                lane_maps[map_name] = LaneSegments(nusc_map, settings)
            out["lanes"][i], out["lanes_valid"][i] = lane_maps[map_name].near(translation, rotation)
    return out
