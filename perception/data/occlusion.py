"""What a camera can see of 3D boxes: near-plane-clipped 2D outlines and visible fractions.

A cuboid's image is the convex hull of its corners after clipping the box to the plane
z = NEAR_PLANE in front of the camera (projecting only the corners in front gives a box that
is too small for objects that cross the camera plane). Occlusion is rendered with an ID
buffer: boxes painted far to near by centre distance, the painter's order the synthetic
renderer uses, so on synthetic data the fractions equal what the images show (apart from
traffic-light poles). On real data only the annotated boxes occlude each other.
"""

from __future__ import annotations

import cv2
import numpy as np

NEAR_PLANE = 0.1  # metres
# Cuboid edges as corner-index pairs (perception.core.geometry.box_corners order: 0-3 one face, 4-7 the other).
EDGES = ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7))


def clipped_outline(corners_cam: np.ndarray, intrinsics: np.ndarray) -> np.ndarray:
    """Image points [K,2] (pixels) outlining the part of a box in front of the near plane.

    corners_cam [8,3]: box corners in the camera frame (x right, y down, z forward). The points
    are the projected corners in front of the plane plus every edge's crossing of it; their
    convex hull is the box's silhouette. Empty [0,2] when the box is wholly behind the plane.
    """
    corners_cam = np.asarray(corners_cam, np.float64)
    points = [p for p in corners_cam if p[2] >= NEAR_PLANE]
    for a, b in EDGES:
        p, q = corners_cam[a], corners_cam[b]
        if (p[2] >= NEAR_PLANE) != (q[2] >= NEAR_PLANE):
            t = (NEAR_PLANE - p[2]) / (q[2] - p[2])
            points.append(p + t * (q - p))
    if not points:
        return np.zeros((0, 2))
    points = np.asarray(points)
    uvw = points @ np.asarray(intrinsics, np.float64).T
    return uvw[:, :2] / uvw[:, 2:3]


def clipped_box_xyxy(corners_cam: np.ndarray, intrinsics: np.ndarray, width: int, height: int) -> np.ndarray | None:
    """The box's 2D extent [4] (x0, y0, x1, y1) clipped to the image, or None if it is not in front."""
    outline = clipped_outline(corners_cam, intrinsics)
    if len(outline) == 0:
        return None
    x0, y0 = np.clip(outline.min(axis=0), 0, [width, height])
    x1, y1 = np.clip(outline.max(axis=0), 0, [width, height])
    return np.array([x0, y0, x1, y1])


def visible_pixels(boxes_corners_cam: list[np.ndarray], intrinsics: np.ndarray, width: int, height: int,
                   scale: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """(visible [N], footprint [N]) pixel counts of N boxes in one camera, at ``scale`` x resolution.

    footprint: pixels of the box's silhouette inside the image, as if nothing else were there;
    visible: pixels where it is the nearest box (painter's order by centre distance).
    visible / footprint is the fraction of the box the camera sees.
    """
    n = len(boxes_corners_cam)
    visible, footprint = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if n == 0:
        return visible, footprint
    w, h = max(int(round(width * scale)), 1), max(int(round(height * scale)), 1)
    ids = np.zeros((h, w), np.int32)  # 0: background, i + 1: box i
    scaled_k = np.diag([scale, scale, 1.0]) @ np.asarray(intrinsics, np.float64)
    distance = [float(np.linalg.norm(np.asarray(c).mean(axis=0))) for c in boxes_corners_cam]
    for i in sorted(range(n), key=lambda j: -distance[j]):
        outline = clipped_outline(boxes_corners_cam[i], scaled_k)
        if len(outline) < 3:
            continue
        outline = np.clip(outline, -4 * w, 5 * w)  # keep cv2's fixed-point arithmetic in range
        hull = cv2.convexHull(np.round(outline * 8).astype(np.int32))
        alone = np.zeros((h, w), np.uint8)
        cv2.fillConvexPoly(alone, hull, 1, shift=3)
        footprint[i] = int(alone.sum())
        if footprint[i]:
            ids[alone.astype(bool)] = i + 1
    counts = np.bincount(ids.ravel(), minlength=n + 1)
    visible[:] = counts[1:]
    return visible, footprint


def visible_fractions(boxes_corners_cam: list[np.ndarray], intrinsics: np.ndarray, width: int, height: int,
                      scale: float = 0.25) -> np.ndarray:
    """Fraction [N] of each box's in-image silhouette that no nearer box hides (0 when not in view)."""
    visible, footprint = visible_pixels(boxes_corners_cam, intrinsics, width, height, scale)
    return np.where(footprint > 0, visible / np.maximum(footprint, 1), 0.0)
