"""Lanes as x positions at fixed image rows (row anchors), the network's lane representation.

A lane is described at ``P`` rows spread evenly over the network input's height below ``top`` (a
fraction of the height, ``model.heads.lanes.row_top``; 0: the whole height), top to bottom: row k sits
at y_k = (top + (k + 0.5) / P * (1 - top)) * H. Lanes lie below the horizon, so rows above it are
never crossed: starting the rows there puts all P on the road (UFLD's CULane row anchors start at
0.42 of the height).

Per row, the lane's x (normalised by the input width) and whether the lane crosses that row inside
the image (visibility). Ground-truth polylines (input pixels) are encoded by intersecting them with
the rows; predictions are decoded back to polylines through the visible rows.
"""

from __future__ import annotations

import numpy as np

# Lane classes (order of ``lanes.logits``). nuScenes map layers: lane_divider (between lanes of
# one direction), road_divider (between directions). BDD100K categories map onto them in
# perception.data.bdd100k (white markings -> lane_divider, yellow -> road_divider).
LANE_CLASSES = ("lane_divider", "road_divider")
MIN_VISIBLE_ROWS = 2  # a lane crossing fewer rows is dropped from the targets


def anchor_rows(num_points: int, height: float, top: float = 0.0) -> np.ndarray:
    """y of the P anchor rows [P] in units of ``height`` (input pixels, or 1 for fractions), top to bottom;
    the rows fill the height below ``top`` (a fraction of it)."""
    return (top + (np.arange(num_points) + 0.5) / num_points * (1.0 - top)) * height


def row_spacing(num_points: int, height: float, top: float = 0.0) -> float:
    """Distance between neighbouring anchor rows, in units of ``height``."""
    return (1.0 - top) * height / num_points


def encode_lane(polyline: np.ndarray, rows: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Polyline [N,2] (x, y input px) -> (x at each row [P] px, visible [P] bool).

    Where the polyline crosses a row more than once, the crossing nearest the image bottom along
    the polyline wins (lanes are labelled from near to far).
    """
    points = np.asarray(polyline, np.float64).reshape(-1, 2)
    xs = np.zeros(len(rows))
    visible = np.zeros(len(rows), bool)
    if len(points) < 2:
        return xs, visible
    if points[0, 1] < points[-1, 1]:  # start at the near (bottom) end
        points = points[::-1]
    p, q = points[:-1], points[1:]  # segments [S,2]
    dy = q[:, 1] - p[:, 1]
    t = (rows[:, None] - p[None, :, 1]) / np.where(dy == 0, np.inf, dy)[None]  # [P,S]
    crosses = (t >= 0) & (t <= 1) & (dy != 0)[None]
    first = np.argmax(crosses, axis=1)
    has = crosses.any(axis=1)
    t_first = t[np.arange(len(rows)), first]
    xs = p[first, 0] + t_first * (q[first, 0] - p[first, 0])
    visible = has & (xs >= 0) & (xs <= width)
    return np.where(visible, xs, 0.0), visible


def decode_lane(xs_normalised: np.ndarray, visible: np.ndarray, input_size: tuple[int, int],
                row_top: float = 0.0) -> np.ndarray:
    """(x [P] in [0, 1], visible [P] bool) -> polyline [K,2] input px through the visible rows, bottom first."""
    height, width = input_size
    rows = anchor_rows(len(xs_normalised), height, row_top)
    keep = np.flatnonzero(visible)[::-1]
    return np.stack([np.asarray(xs_normalised)[keep] * width, rows[keep]], axis=1)
