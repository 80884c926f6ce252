"""Drawing primitives: drivable overlay, lanes, traffic lights with state, projected 3D boxes, a BEV panel.

The task specs draw their results with these (``Task.draw``); perception.inference.annotate puts a
frame together.

All drawing is OpenCV on uint8 RGB images, in original-image pixels; line widths scale with the
image so 1600x900 and 480x270 frames read alike.
"""

from __future__ import annotations

import cv2
import numpy as np

from perception.core.geometry import box_corners, project_points
from perception.core.light_states import LIGHT_STATES
from perception.core.nuscenes_constants import DETECTION_CLASSES
from perception.postprocess.obstacles import CameraBoxes

DRIVABLE_RGB = (0, 200, 90)
LANE_RGB = {0: (255, 255, 255), 1: (255, 200, 0)}  # lane_divider white, road_divider yellow
TRUTH_RGB = (255, 0, 255)  # ground truth, wherever it is drawn beside predictions
LIGHT_RGB = {"red": (255, 40, 40), "yellow": (255, 210, 0), "green": (40, 230, 80), "off": (160, 160, 160)}
# Hues from red to blue only (OpenCV hue 0-130 of 180): magenta is TRUTH_RGB's.
CLASS_RGB = {name: tuple(int(c) for c in cv2.cvtColor(np.uint8([[[int(130 * i / len(DETECTION_CLASSES)), 220, 255]]]),
                                                      cv2.COLOR_HSV2RGB)[0, 0])
             for i, name in enumerate(DETECTION_CLASSES)}
# Box edges by corner index (box_corners: 0-3 front face, 4-7 back, 0,1,4,5 top).
BOX_EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7)]


def _thickness(image: np.ndarray) -> int:
    return max(1, round(image.shape[1] / 500))


def camera_rotation(yaw_cam: float) -> np.ndarray:
    """[3,3] box frame (x forward along the heading, y left, z up) -> camera frame (x right, y down, z forward)."""
    s, c = np.sin(yaw_cam), np.cos(yaw_cam)
    return np.array([[s, -c, 0.0], [0.0, 0.0, -1.0], [c, s, 0.0]])


def draw_drivable(image: np.ndarray, mask: np.ndarray, alpha: float = 0.4) -> None:
    region = mask.astype(bool)
    image[region] = ((1 - alpha) * image[region] + alpha * np.array(DRIVABLE_RGB)).astype(np.uint8)


def draw_lanes(image: np.ndarray, lanes, colour: tuple | None = None, width: int | None = None) -> None:
    """``colour``/``width`` override the class colour and the width (ground truth: thin, in TRUTH_RGB)."""
    for polyline, label in zip(lanes.polylines, lanes.labels):
        points = np.round(polyline).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(image, [points], False, colour or LANE_RGB.get(int(label), (255, 255, 255)),
                      width or 2 * _thickness(image), cv2.LINE_AA)


def draw_lights(image: np.ndarray, lights: dict, min_score: float) -> None:
    t = _thickness(image)
    for box, label, score in zip(lights["boxes_xyxy"], lights["labels"], lights["scores"]):
        if score < min_score:
            continue
        state = LIGHT_STATES[int(label)]
        x0, y0, x1, y1 = np.round(box).astype(int)
        cv2.rectangle(image, (x0, y0), (x1, y1), LIGHT_RGB[state], t)
        cv2.putText(image, f"{state} {score:.2f}", (x0, max(y0 - 4, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.35 * t,
                    LIGHT_RGB[state], max(1, t // 2), cv2.LINE_AA)


def draw_boxes_3d(image: np.ndarray, boxes: CameraBoxes, intrinsics: np.ndarray, min_score: float,
                  colour: tuple | None = None) -> None:
    """Project each box's 8 corners with the camera's intrinsics (original pixels); boxes behind the camera skipped.

    ``colour`` replaces the class colours and the score label (ground truth: TRUTH_RGB, class name only)."""
    t = _thickness(image)
    for i in np.flatnonzero(boxes.scores >= min_score):
        corners = box_corners(boxes.center_cam[i], boxes.size_wlh[i], camera_rotation(boxes.yaw_cam[i]))
        uv, depth = project_points(corners, intrinsics)
        if (depth <= 0.1).any():
            continue
        name = DETECTION_CLASSES[int(boxes.labels[i])]
        points = np.round(uv).astype(int)
        rgb = colour or CLASS_RGB[name]
        for a, b in BOX_EDGES:
            cv2.line(image, tuple(points[a]), tuple(points[b]), rgb, t, cv2.LINE_AA)
        top = points[:, 1].min()
        text = name if colour else f"{name} {boxes.scores[i]:.2f}"
        cv2.putText(image, text, (int(points[:, 0].min()), max(int(top) - 4, 10)),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.35 * t, rgb, max(1, t // 2), cv2.LINE_AA)


def draw_boxes_2d(image: np.ndarray, boxes_xyxy: np.ndarray, colour: tuple = None) -> None:
    """Plain rectangles (ground-truth traffic lights), original pixels."""
    for box in np.asarray(boxes_xyxy, np.float64).reshape(-1, 4):
        x0, y0, x1, y1 = np.round(box).astype(int)
        cv2.rectangle(image, (x0 - 1, y0 - 1), (x1 + 1, y1 + 1), colour or TRUTH_RGB, 1)


def draw_mask_outline(image: np.ndarray, mask: np.ndarray, colour: tuple = None) -> None:
    """The outline of a 0/1 mask (ground-truth drivable area); other values (ignore) count as 0."""
    contours, _ = cv2.findContours((mask == 1).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(image, contours, -1, colour or TRUTH_RGB, _thickness(image), cv2.LINE_AA)


def bev_panel(boxes_xy_yaw: list[tuple[str, float, np.ndarray, float, float]], size: int,
              range_m: float = 60.0, surround: bool = False, truth: list = ()) -> np.ndarray:
    """Top-down view, forward up, ego at the bottom centre (``surround``: at the centre): [size,size,3] uint8.

    ``boxes_xy_yaw``: (class name, score, centre (right, forward) m, heading angle from forward
    towards right (rad), (width, length)) per box; ``truth``: entries alike, drawn thin in TRUTH_RGB.
    """
    panel = np.full((size, size, 3), 30, np.uint8)
    scale = size / (range_m * (2.2 if surround else 1.1))
    origin = np.array([size / 2.0, size / 2.0 if surround else size * 0.95])

    def to_px(xy: np.ndarray) -> np.ndarray:
        return origin + np.stack([xy[..., 0], -xy[..., 1]], -1) * scale

    for radius in range(10, int(range_m) + 1, 10):
        cv2.circle(panel, tuple(np.round(origin).astype(int)), int(radius * scale), (70, 70, 70), 1, cv2.LINE_AA)
        cv2.putText(panel, f"{radius} m", tuple(np.round(origin + [4, -radius * scale - 2]).astype(int)),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.35, (120, 120, 120), 1, cv2.LINE_AA)
    ego = to_px(np.array([[-0.9, -2.0], [0.9, -2.0], [0.9, 2.0], [-0.9, 2.0]]))
    cv2.fillPoly(panel, [np.round(ego).astype(np.int32)], (230, 230, 230))
    entries = [(entry, TRUTH_RGB, 1) for entry in truth]
    entries += [(entry, CLASS_RGB[entry[0]], 2) for entry in boxes_xy_yaw]
    for (_name, _score, centre, heading, (width, length)), colour, thickness in entries:
        forward = np.array([np.sin(heading), np.cos(heading)])
        right = np.array([forward[1], -forward[0]])
        corners = centre + np.array([f * length / 2 * forward + r * width / 2 * right
                                     for f, r in ((1, 1), (1, -1), (-1, -1), (-1, 1))])
        pixels = np.round(to_px(corners)).astype(np.int32)
        cv2.polylines(panel, [pixels], True, colour, thickness, cv2.LINE_AA)
        cv2.line(panel, tuple(np.round(to_px(centre)).astype(int)),
                 tuple(np.round(to_px(centre + forward * length / 2)).astype(int)), colour, thickness, cv2.LINE_AA)
    cv2.putText(panel, "BEV (m), forward up", (8, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (200, 200, 200), 1,
                cv2.LINE_AA)
    return panel


def camera_bev_entries(boxes: CameraBoxes, min_score: float) -> list:
    """Camera-frame boxes as BEV entries: right = x, forward = z, heading = yaw_cam."""
    keep = np.flatnonzero(boxes.scores >= min_score)
    return [(DETECTION_CLASSES[int(boxes.labels[i])], float(boxes.scores[i]), boxes.center_cam[i, [0, 2]],
             float(boxes.yaw_cam[i]), boxes.size_wlh[i, :2]) for i in keep]
