"""Camera images of the synthetic world, rendered from the geometry the labels come from.

Ground: every pixel's viewing ray is intersected with the flat ground (z = 0, global) and
coloured from a 10 px/m semantic raster of the map. Objects: 3D cuboids drawn with
back-face culling, near-plane clipping and painter's ordering. Traffic lights: a pole and a
housing whose lit lamp shows the current state.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from perception.core.geometry import (
    apply_transform,
    box_corners,
    invert_transform,
    pixel_rays,
    polygon_mask,
    rays_to_ground,
)
from perception.synthetic.world import LIGHT_STATES, MapWorld

RASTER_RESOLUTION = 0.1  # metres per ground-raster pixel
SHIFT = 3  # fixed-point bits for cv2 polygon drawing

GROUND = dict(grass=0, asphalt=1, walkway=2, carpark=3, white=4, yellow=5)
GROUND_RGB = np.array([(72, 108, 56), (84, 84, 88), (152, 146, 136), (104, 102, 106), (228, 228, 226),
                       (222, 188, 44)], dtype=np.float32)
SKY_TOP, SKY_HORIZON, HAZE = np.array([110, 160, 220.0]), np.array([205, 218, 232.0]), np.array([170, 180, 190.0])

CATEGORY_RGB = {
    "vehicle.car": (40, 84, 200), "vehicle.truck": (205, 120, 30), "vehicle.bus.rigid": (150, 40, 160),
    "vehicle.trailer": (125, 72, 40), "vehicle.construction": (235, 160, 0), "vehicle.motorcycle": (205, 30, 35),
    "vehicle.bicycle": (30, 185, 185), "human.pedestrian.adult": (235, 60, 125),
    "movable_object.trafficcone": (255, 105, 0), "movable_object.barrier": (235, 235, 235),
}
LAMP_RGB = {"red": (255, 40, 30), "yellow": (255, 200, 20), "green": (40, 255, 90)}
FACES = ((0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (3, 2, 6, 7), (0, 3, 7, 4), (1, 2, 6, 5))
FACE_SHADE = (0.95, 0.75, 1.05, 0.5, 0.85, 0.65)


class GroundRaster:
    """Semantic raster of the map (rows = y / res, cols = x / res) with a texture tile."""

    def __init__(self, world: MapWorld, rng: np.random.Generator):
        width = int(math.ceil(world.canvas_edge[0] / RASTER_RESOLUTION))
        height = int(math.ceil(world.canvas_edge[1] / RASTER_RESOLUTION))
        raster = np.full((height, width), GROUND["grass"], np.uint8)
        for walkway in world.walkways:
            _fill(raster, walkway, GROUND["walkway"])
        _fill(raster, world.drivable, GROUND["asphalt"])
        _fill(raster, world.carpark, GROUND["carpark"])
        for line in world.road_edges:
            _polyline(raster, line, GROUND["white"], 0.2)
        for line in world.lane_dividers:
            _polyline(raster, line, GROUND["white"], 0.15, dash=(3.0, 6.0))
        for line in world.road_dividers:
            _polyline(raster, line, GROUND["yellow"], 0.3)
        for polygon in world.stop_lines:
            _fill(raster, polygon, GROUND["white"])
        for crossing in world.ped_crossings:
            _zebra(raster, crossing)
        self.raster = raster
        self.texture = rng.normal(0.0, 1.0, size=(64, 64)).astype(np.float32)
        self.texture = cv2.GaussianBlur(self.texture, (3, 3), 0) * 7.0

    def colours(self, xy: np.ndarray) -> np.ndarray:
        """Ground colour [...,3] (float RGB) at global points [...,2]; off-map is grass."""
        col = np.floor(xy[..., 0] / RASTER_RESOLUTION).astype(np.int64)
        row = np.floor(xy[..., 1] / RASTER_RESOLUTION).astype(np.int64)
        inside = (col >= 0) & (row >= 0) & (col < self.raster.shape[1]) & (row < self.raster.shape[0])
        labels = np.where(inside, self.raster[np.clip(row, 0, self.raster.shape[0] - 1),
                                              np.clip(col, 0, self.raster.shape[1] - 1)], GROUND["grass"])
        noise = self.texture[(row // 2) % 64, (col // 2) % 64]
        return GROUND_RGB[labels] + noise[..., None]


def _to_pixels(coords) -> np.ndarray:
    return np.round(np.asarray(coords)[:, :2] / RASTER_RESOLUTION * (1 << SHIFT)).astype(np.int32)


def _fill(raster, geometry, value) -> None:
    """Paint a (multi)polygon with holes onto the raster, leaving the holes untouched."""
    raster[polygon_mask(raster.shape, geometry, resolution=RASTER_RESOLUTION, shift=SHIFT)] = value


def _polyline(raster, points, value, width_m, dash=None) -> None:
    thickness = max(1, int(round(width_m / RASTER_RESOLUTION)))
    if dash is None:
        cv2.polylines(raster, [_to_pixels(points)], False, int(value), thickness, shift=SHIFT)
        return
    on, off = dash
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    keep = (s % (on + off)) < on
    for i in range(len(points) - 1):
        if keep[i]:
            cv2.polylines(raster, [_to_pixels(points[i:i + 2])], False, int(value), thickness, shift=SHIFT)


def _zebra(raster, crossing) -> None:
    corners = np.asarray(crossing.exterior.coords)[:4]
    a, b, d = corners[0], corners[1], corners[3]
    length_dir = d - a  # across the road
    n = max(int(np.linalg.norm(length_dir) / 1.0), 1)
    for i in range(0, n, 2):
        p0 = a + length_dir * i / n
        p1 = a + length_dir * (i + 1) / n
        stripe = np.array([p0, p1, p1 + (b - a), p0 + (b - a)])
        cv2.fillPoly(raster, [_to_pixels(stripe)], int(GROUND["white"]), shift=SHIFT)


def _clip_near(polygon: np.ndarray, near: float = 0.1) -> np.ndarray:
    """Sutherland-Hodgman clip of a camera-frame polygon [N,3] to z >= near."""
    out = []
    for i in range(len(polygon)):
        p, q = polygon[i], polygon[(i + 1) % len(polygon)]
        p_in, q_in = p[2] >= near, q[2] >= near
        if p_in:
            out.append(p)
        if p_in != q_in:
            t = (near - p[2]) / (q[2] - p[2])
            out.append(p + t * (q - p))
    return np.array(out)


def _draw_polygon(image, points_cam, intrinsics, colour) -> None:
    clipped = _clip_near(points_cam)
    if len(clipped) < 3:
        return
    uvw = clipped @ intrinsics.T
    uv = uvw[:, :2] / uvw[:, 2:3]
    uv = np.clip(uv, -4 * image.shape[1], 5 * image.shape[1])
    pts = np.round(uv * (1 << SHIFT)).astype(np.int32)
    cv2.fillPoly(image, [pts], tuple(int(c) for c in np.clip(colour, 0, 255)), lineType=cv2.LINE_AA, shift=SHIFT)


def _draw_cuboid(image, corners_cam, intrinsics, rgb) -> None:
    centre = corners_cam.mean(axis=0)
    for face, shade in zip(FACES, FACE_SHADE):
        quad = corners_cam[list(face)]
        normal_dir = quad.mean(axis=0) - centre
        if np.dot(normal_dir, -quad.mean(axis=0)) <= 0:  # faces away from the camera
            continue
        _draw_polygon(image, quad, intrinsics, np.asarray(rgb) * shade)


def render_camera(ground: GroundRaster, world: MapWorld, intrinsics: np.ndarray, global_from_cam: np.ndarray,
                  width: int, height: int, objects: list[tuple[np.ndarray, str, float]], time_s: float,
                  rays: np.ndarray | None = None) -> np.ndarray:
    """RGB uint8 image [H,W,3]. ``objects``: (corners_global [8,3], category, tint)."""
    if rays is None:
        rays = pixel_rays(intrinsics, height, width)
    points, t = rays_to_ground(rays, global_from_cam)
    hits = t > 0
    distance = np.where(hits, np.linalg.norm(points[..., :2] - global_from_cam[:2, 3], axis=-1), np.inf)
    image = np.empty((height, width, 3), np.float32)
    # Sky: a vertical gradient by ray elevation.
    directions = rays @ global_from_cam[:3, :3].T
    elevation = directions[..., 2] / np.linalg.norm(directions, axis=-1)
    w_sky = np.clip(elevation / 0.5, 0, 1)[..., None]
    image[:] = SKY_HORIZON * (1 - w_sky) + SKY_TOP * w_sky
    if hits.any():
        ground_rgb = ground.colours(points[hits][:, :2])
        haze = np.clip((distance[hits] - 60.0) / 250.0, 0, 0.85)[:, None]
        image[hits] = ground_rgb * (1 - haze) + HAZE * haze
    image = np.clip(image, 0, 255).astype(np.uint8)

    cam_from_global = invert_transform(global_from_cam)
    drawables = []
    for corners, category, tint in objects:
        corners_cam = apply_transform(cam_from_global, corners)
        if corners_cam[:, 2].max() < 0.1:
            continue
        rgb = np.asarray(CATEGORY_RGB.get(category, (128, 128, 128)), np.float32) * tint
        drawables.append((float(np.linalg.norm(corners_cam.mean(axis=0))), "box", corners_cam, rgb))
    for light in world.traffic_lights:
        drawables.extend(_light_drawables(light, cam_from_global, time_s))
    for _, kind, geometry, rgb in sorted(drawables, key=lambda d: -d[0]):
        if kind == "box":
            _draw_cuboid(image, geometry, intrinsics, rgb)
        else:
            _draw_polygon(image, geometry, intrinsics, rgb)
    return image


def _light_drawables(light, cam_from_global, time_s):
    """Pole, housing and three lamps of one traffic light, in the camera frame."""
    yaw = light.yaw
    rotation = np.array([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]])
    x, y, z = light.position
    pole = box_corners((x, y, z / 2 - 0.3), (0.18, 0.18, z - 0.6), rotation)
    housing = box_corners((x, y, z), (0.42, 0.36, 1.15), rotation)
    out = []
    for corners, rgb in ((pole, (70, 70, 70)), (housing, (30, 30, 32))):
        cam = apply_transform(cam_from_global, corners)
        if cam[:, 2].max() >= 0.1:
            out.append((float(np.linalg.norm(cam.mean(axis=0))), "box", cam, np.array(rgb, np.float32)))
    state = light.state(time_s)
    forward = rotation[:, 0]
    for lamp_state, dz in zip(LIGHT_STATES[::-1], (0.34, 0.0, -0.34)):  # red top, green bottom
        centre = np.array([x, y, z + dz]) + forward * 0.19
        half_side = rotation[:, 1] * 0.13
        half_up = np.array([0, 0, 0.13])
        quad = np.array([centre + half_side + half_up, centre - half_side + half_up,
                         centre - half_side - half_up, centre + half_side - half_up])
        cam = apply_transform(cam_from_global, quad)
        facing = np.dot(cam_from_global[:3, :3] @ forward, -cam.mean(axis=0))
        if cam[:, 2].max() < 0.1 or facing <= 0:
            continue
        rgb = LAMP_RGB[lamp_state] if lamp_state == state else (55, 55, 55)
        # Slightly nearer than the housing so painter's order draws it on top.
        out.append((float(np.linalg.norm(cam.mean(axis=0))) - 0.3, "quad", cam, np.array(rgb, np.float32)))
    return out
