"""Rigid transforms, 3D boxes and pinhole projection.

Frames follow nuScenes: global/ego are right-handed, x forward, y left, z up; the camera
frame is x right, y down, z forward (optical axis). 4x4 matrices map column points
``p_dst = T_dst_from_src @ p_src``; they are named ``<dst>_from_<src>``.
"""

from __future__ import annotations

import numpy as np
from pyquaternion import Quaternion


def transform_matrix(rotation_wxyz, translation) -> np.ndarray:
    """[4,4] homogeneous transform from a nuScenes (w, x, y, z) quaternion and a translation."""
    matrix = np.eye(4)
    matrix[:3, :3] = Quaternion(rotation_wxyz).rotation_matrix
    matrix[:3, 3] = np.asarray(translation, dtype=np.float64)
    return matrix


def invert_transform(matrix: np.ndarray) -> np.ndarray:
    rotation, translation = matrix[:3, :3], matrix[:3, 3]
    inverse = np.eye(4)
    inverse[:3, :3] = rotation.T
    inverse[:3, 3] = -rotation.T @ translation
    return inverse


def apply_transform(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """points [N,3] -> [N,3]."""
    return points @ matrix[:3, :3].T + matrix[:3, 3]


def yaw_to_quaternion(yaw: float) -> list[float]:
    """Rotation about +z (up) as a nuScenes (w, x, y, z) list."""
    return list(Quaternion(axis=[0.0, 0.0, 1.0], angle=float(yaw)).elements)


def box_corners(center, size_wlh, rotation: np.ndarray) -> np.ndarray:
    """Eight corners [8,3] of a box in the frame of ``center`` / ``rotation`` ([3,3]).

    ``size_wlh`` is nuScenes order (width along the box's y, length along x, height along z).
    Corners 0-3 are the front face (+x), 4-7 the back; 0,1,4,5 are the top (+z).
    """
    w, l, h = size_wlh
    x = l / 2 * np.array([1, 1, 1, 1, -1, -1, -1, -1])
    y = w / 2 * np.array([1, -1, -1, 1, 1, -1, -1, 1])
    z = h / 2 * np.array([1, 1, -1, -1, 1, 1, -1, -1])
    corners = np.stack([x, y, z], axis=1)
    return corners @ np.asarray(rotation).T + np.asarray(center)


def project_points(points_cam: np.ndarray, intrinsics: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Camera-frame points [N,3] -> pixel coordinates [N,2] and depth [N] (z, metres)."""
    depth = points_cam[:, 2]
    uvw = points_cam @ np.asarray(intrinsics).T
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = uvw[:, :2] / uvw[:, 2:3]
    return uv, depth


def pixel_rays(intrinsics: np.ndarray, height: int, width: int) -> np.ndarray:
    """Unnormalised viewing rays [H,W,3] in the camera frame through pixel centres.

    Pixel (u, v) covers [u, u+1) x [v, v+1); its centre is (u + 0.5, v + 0.5), the same
    continuous convention the projection and the augmentations use.
    """
    u = np.arange(width, dtype=np.float64) + 0.5
    v = np.arange(height, dtype=np.float64) + 0.5
    uu, vv = np.meshgrid(u, v)
    pixels = np.stack([uu, vv, np.ones_like(uu)], axis=-1)
    return pixels @ np.linalg.inv(intrinsics).T


def rays_to_ground(
    rays_cam: np.ndarray, frame_from_cam: np.ndarray, ground_z: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Intersect camera rays [...,3] with the plane z = ground_z of ``frame`` (flat ground).

    Returns points [...,3] in ``frame`` and the ray parameter t [...]; t <= 0 means the ray
    never reaches the ground (at or above the horizon). Points for those rays are undefined.
    """
    directions = rays_cam @ frame_from_cam[:3, :3].T
    origin = frame_from_cam[:3, 3]
    dz = directions[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(dz < -1e-9, (ground_z - origin[2]) / dz, -1.0)
    points = origin + directions * t[..., None]
    return points, t


def polygon_mask(shape: tuple[int, int], geometries, origin=(0.0, 0.0), resolution: float = 0.1,
                 shift: int = 3) -> np.ndarray:
    """Boolean raster [rows, cols] covered by shapely (multi)polygons, each without its holes.

    Cell (row, col) spans y in origin_y + row * resolution (+resolution), x likewise; vertices are
    drawn with ``shift`` fractional bits. Non-polygon parts (lines, points from an intersection)
    are skipped.
    """
    import cv2

    origin = np.asarray(origin, dtype=np.float64)

    def cells(coords) -> np.ndarray:
        return np.round((np.asarray(coords)[:, :2] - origin) / resolution * (1 << shift)).astype(np.int32)

    covered = np.zeros(shape, bool)
    polygon = np.zeros(shape, np.uint8)
    for geometry in geometries if isinstance(geometries, (list, tuple)) else [geometries]:
        for part in getattr(geometry, "geoms", [geometry]):
            if part.is_empty or part.geom_type != "Polygon":
                continue
            polygon[:] = 0
            cv2.fillPoly(polygon, [cells(part.exterior.coords)], 1, shift=shift)
            for hole in part.interiors:
                cv2.fillPoly(polygon, [cells(hole.coords)], 0, shift=shift)
            covered |= polygon.astype(bool)
    return covered
