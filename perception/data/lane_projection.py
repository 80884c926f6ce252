"""Image-space lane labels for nuScenes from the map expansion, under the flat-ground assumption.

The map's ``lane_divider`` and ``road_divider`` lines (2D, global frame) are placed on the ground
at the ego vehicle's height, densified, moved into the camera frame and projected; the parts in
front of the camera (depth >= NEAR_DEPTH) and within ``max_range`` are clipped to the image.
Like the drivable labels these are map-derived: markings hidden behind vehicles are still labelled.
"""

from __future__ import annotations

import numpy as np
from shapely.geometry import LineString
from shapely.geometry import box as shapely_box

from perception.core.geometry import apply_transform, invert_transform, project_points
from perception.core.lane_coding import LANE_CLASSES

NEAR_DEPTH = 1.0  # metres in front of the camera; nearer points project unstably
SPACING = 1.0  # metres between densified points (perspective bends a straight map segment)
MIN_IMAGE_LENGTH = 0.05  # a clipped piece shorter than this fraction of the image height is dropped


class MapLines:
    """Lane and road dividers of one NuScenesMap: (points [N,2] global, class index), extracted once."""

    LAYERS = {"lane_divider": LANE_CLASSES.index("lane_divider"), "road_divider": LANE_CLASSES.index("road_divider")}

    def __init__(self, nusc_map):
        self.lines: list[tuple[np.ndarray, int]] = []
        for layer, label in self.LAYERS.items():
            for record in getattr(nusc_map, layer):
                line = nusc_map.extract_line(record["line_token"])
                if line.is_empty or line.length == 0:
                    continue
                self.lines.append((np.asarray(line.segmentize(SPACING).coords)[:, :2], label))
        self.bounds = np.array([[*p.min(0), *p.max(0)] for p, _ in self.lines]).reshape(-1, 4)

    def near(self, xy: np.ndarray, radius: float) -> list[tuple[np.ndarray, int]]:
        b = self.bounds
        close = (b[:, 0] <= xy[0] + radius) & (b[:, 2] >= xy[0] - radius) & \
                (b[:, 1] <= xy[1] + radius) & (b[:, 3] >= xy[1] - radius)
        return [self.lines[i] for i in np.flatnonzero(close)]


def project_lane_lines(lines: MapLines, intrinsics: np.ndarray, global_from_camera: np.ndarray, ground_z: float,
                       width: int, height: int, max_range: float) -> dict:
    """{"polylines": [[[x, y], ...], ...] original px, "labels": [class index, ...]}."""
    polylines, labels = [], []
    for points, label in lines.near(global_from_camera[:2, 3], max_range):
        for piece in project_ground_line(points, intrinsics, global_from_camera, ground_z, width, height, max_range):
            polylines.append(np.round(piece, 1).tolist())
            labels.append(label)
    return {"polylines": polylines, "labels": labels}


def project_ground_line(points_xy: np.ndarray, intrinsics: np.ndarray, global_from_camera: np.ndarray,
                        ground_z: float, width: int, height: int, max_range: float) -> list[np.ndarray]:
    """A ground line (global [N,2], densified) -> its visible pieces in the image, each [K,2] px."""
    camera_from_global = invert_transform(global_from_camera)
    in_range = np.linalg.norm(points_xy - global_from_camera[:2, 3], axis=1) <= max_range
    camera = apply_transform(camera_from_global, np.c_[points_xy, np.full(len(points_xy), ground_z)])
    image = shapely_box(0, 0, width, height)
    pieces = []
    for run in _runs(in_range & (camera[:, 2] >= NEAR_DEPTH)):
        if len(run) < 2:
            continue
        uv, _ = project_points(camera[run], intrinsics)
        pieces += [np.asarray(piece.coords) for piece in _pieces(LineString(uv).intersection(image))
                   if piece.length >= MIN_IMAGE_LENGTH * height]
    return pieces


def _runs(flags: np.ndarray) -> list[np.ndarray]:
    """Index arrays of the maximal runs of consecutive True values."""
    edges = np.diff(np.r_[0, flags.astype(np.int8), 0])
    return [np.arange(start, stop) for start, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1))]


def _pieces(geometry) -> list[LineString]:
    if geometry.is_empty:
        return []
    if geometry.geom_type == "LineString":
        return [geometry]
    return [g for g in getattr(geometry, "geoms", []) if g.geom_type == "LineString"]
