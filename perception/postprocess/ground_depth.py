"""Depth from the ground plane, fused with the regressed depth of a box.

A box resting on flat ground has its bottom centre on the ground. nuScenes' ego frame has its origin at the rear
axle projected onto the ground, z up (devkit issues #161 and #691): near the car the ground is ego z = 0 and a
camera's height over it is its calibrated z. The ray through the bottom centre's pixel, r = K^-1 (u, v, 1) (camera
frame, z = 1), meets the ground at depth z = height / (-up . r): for a level camera z = fy x height / (v - cy). A
pixel of error in v moves that depth by z^2 / (fy x height): a few percent at 10-30 m for a camera 1.5 m up, and
more further out, where the regressed depth (a fixed relative error) is the better estimate. The two are fused by
inverse variance in log depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_DESCENT = 1e-6  # a ray that descends less than this per metre of depth meets the ground nowhere near


@dataclass(frozen=True)
class GroundDepth:
    up: np.ndarray  # [3] the ego's up direction in the camera frame (x right, y down, z forward)
    height: float  # metres of the camera over the ground plane
    bottom_px_error: float  # expected error of the bottom centre's row, input px
    depth_relative_error: float  # expected relative error of the regressed depth


def ground_in_camera(ego_from_camera: np.ndarray) -> tuple[np.ndarray, float]:
    """ego_from_camera [4,4] -> (up [3] in the camera frame, camera height over ego z = 0 in metres)."""
    up = ego_from_camera[:3, :3].T @ np.array([0.0, 0.0, 1.0])
    return up, float(ego_from_camera[2, 3])


def ground_plane_depth(u: np.ndarray, v: np.ndarray, intrinsics: np.ndarray, ground: GroundDepth) -> np.ndarray:
    """[N] pixels (u, v) of the input -> [N] camera depth where their rays meet the ground; NaN where a ray does not
    descend (at or above the horizon)."""
    pixels = np.stack([u, v, np.ones_like(u)], axis=1)
    rays = pixels @ np.linalg.inv(intrinsics).T  # (N, 3), z = 1
    descent = -(rays @ ground.up)  # metres down per metre of depth
    depth = np.full(len(u), np.nan)
    hits = descent > MIN_DESCENT
    depth[hits] = ground.height / descent[hits]
    return depth


def fuse_ground_depth(regressed: np.ndarray, centre_u: np.ndarray, bottom_v: np.ndarray, box_height: np.ndarray,
                      intrinsics: np.ndarray, ground: GroundDepth) -> np.ndarray:
    """Depths [N] of box centres (camera z, metres): the regressed ones fused with the ground-plane ones.

    centre_u, bottom_v [N]: input px of the projected centre's column and the bottom centre's row (directly below
    the centre for a level camera); box_height [N] metres (the centre is half of it above the bottom)."""
    bottom = ground_plane_depth(centre_u, bottom_v, intrinsics, ground)
    geometric = bottom + 0.5 * box_height * ground.up[2]  # the centre, h/2 up; ~ the bottom's depth when level
    usable = np.isfinite(geometric) & (geometric > 0.1)
    geometric = np.where(usable, geometric, 1.0)  # a placeholder where the weight below is 0
    relative_error = geometric * ground.bottom_px_error / (float(intrinsics[1, 1]) * ground.height)
    weight = np.where(usable, 1.0 / relative_error ** 2, 0.0)
    regressed_weight = 1.0 / ground.depth_relative_error ** 2
    log_depth = np.log(np.clip(regressed, 0.1, None)) * regressed_weight + np.log(geometric) * weight
    return np.exp(log_depth / (regressed_weight + weight))
