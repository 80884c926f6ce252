"""Planar paths built from straight and constant-curvature pieces (what nuScenes calls arclines).

A pose is (x, y, yaw) in the global map frame, metres and radians, yaw counter-clockwise
from +x. Curvature is signed: > 0 turns left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STRAIGHT_RADIUS = 999.0  # the radius nuScenes writes for straight arclines


@dataclass(frozen=True)
class Piece:
    start: tuple[float, float, float]
    length: float
    curvature: float = 0.0

    def pose_at(self, s: float) -> tuple[float, float, float]:
        x, y, yaw = self.start
        k = self.curvature
        if abs(k) < 1e-9:
            return x + s * math.cos(yaw), y + s * math.sin(yaw), yaw
        new_yaw = yaw + k * s
        return (
            x + (math.sin(new_yaw) - math.sin(yaw)) / k,
            y - (math.cos(new_yaw) - math.cos(yaw)) / k,
            new_yaw,
        )

    @property
    def end(self) -> tuple[float, float, float]:
        return self.pose_at(self.length)

    def offset(self, lateral: float) -> Piece:
        """The parallel piece ``lateral`` metres to the left (negative: right)."""
        x, y, yaw = self.start
        start = (x - lateral * math.sin(yaw), y + lateral * math.cos(yaw), yaw)
        scale = 1.0 - self.curvature * lateral
        if scale <= 0:
            raise ValueError(f"offset {lateral} m exceeds the turn radius {1 / self.curvature:.1f} m")
        return Piece(start, self.length * scale, self.curvature / scale)

    def reversed(self) -> Piece:
        x, y, yaw = self.end
        return Piece((x, y, yaw + math.pi), self.length, -self.curvature)

    def to_arcline(self) -> dict:
        """The nuScenes ``arcline_path_3`` record for this piece."""
        k = self.curvature
        x, y, yaw = self.start
        yaw = (yaw + math.pi) % (2 * math.pi) - math.pi
        if abs(k) < 1e-9:
            return dict(start_pose=[x, y, yaw], end_pose=list(self.end), shape="LSL",
                        radius=STRAIGHT_RADIUS, segment_length=[0.0, self.length, 0.0])
        return dict(start_pose=[x, y, yaw], end_pose=list(self.end), shape="LSL" if k > 0 else "RSR",
                    radius=1.0 / abs(k), segment_length=[self.length, 0.0, 0.0])


class LoopPath:
    """A closed path: pieces end to end, arclength s wraps around."""

    def __init__(self, pieces: list[Piece]):
        self.pieces = pieces
        self.starts = np.concatenate([[0.0], np.cumsum([p.length for p in pieces])])
        self.length = float(self.starts[-1])

    def pose_at(self, s: float) -> tuple[float, float, float]:
        s = s % self.length
        index = int(np.searchsorted(self.starts, s, side="right") - 1)
        index = min(index, len(self.pieces) - 1)
        return self.pieces[index].pose_at(s - self.starts[index])

    def offset(self, lateral: float) -> LoopPath:
        return LoopPath([p.offset(lateral) for p in self.pieces])

    def reversed(self) -> LoopPath:
        return LoopPath([p.reversed() for p in reversed(self.pieces)])

    def sample(self, spacing: float = 1.0) -> np.ndarray:
        """Points [N,2] every ~``spacing`` metres, closed (last point == first)."""
        count = max(int(math.ceil(self.length / spacing)), 8)
        poses = [self.pose_at(s) for s in np.linspace(0.0, self.length, count + 1)]
        return np.array([(x, y) for x, y, _ in poses])


def rounded_rectangle(origin: tuple[float, float], width: float, height: float,
                      radii: tuple[float, float, float, float], bump: tuple[float, float] | None = None) -> LoopPath:
    """Counter-clockwise loop around a rectangle with rounded corners.

    radii are (bottom-right, top-right, top-left, bottom-left). ``bump`` = (radius, angle)
    replaces the middle of the top side by an S-bend out and back (left, right, right, left)
    so the loop has curves of both signs.
    """
    x0, y0 = origin
    r_br, r_tr, r_tl, r_bl = radii
    pieces: list[Piece] = []

    def add(length: float, curvature: float = 0.0) -> None:
        start = pieces[-1].end if pieces else (x0 + r_bl, y0, 0.0)
        pieces.append(Piece(start, length, curvature))

    quarter = math.pi / 2
    add(width - r_bl - r_br)
    add(r_br * quarter, 1 / r_br)
    add(height - r_br - r_tr)
    add(r_tr * quarter, 1 / r_tr)
    top = width - r_tr - r_tl
    if bump is not None:
        radius, angle = bump
        bump_length = 4 * radius * math.sin(angle)
        if bump_length < top - 10:
            lead = (top - bump_length) / 2
            add(lead)
            for sign in (1, -1, -1, 1):
                add(radius * angle, sign / radius)
            add(lead)
            top = 0.0
    if top > 0:
        add(top)
    add(r_tl * quarter, 1 / r_tl)
    add(height - r_tl - r_bl)
    add(r_bl * quarter, 1 / r_bl)
    return LoopPath(pieces)
