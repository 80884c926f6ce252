"""Write a synthetic dataset in the BDD100K on-disk layout (see perception.data.bdd100k).

Front-camera frames from an ego car driving the synthetic worlds (its own worlds, not the
synthetic nuScenes ones), rendered from the same geometry the labels come from:

- traffic lights: the housing's projected box; the state of the lit lamp when the lamps face
  the camera, "NA" when the camera sees the light from behind or the side;
- lanes: lane dividers ("single white", dashed), road dividers ("single yellow") and road edges
  ("road curb") projected onto the image (flat ground), as poly2d;
- drivable area: 0 direct (the ego car's side of the road), 1 alternative, 2 background;
- other road users as 2D boxes (car, truck, bus, motorcycle, bicycle, pedestrian).

Frames are picked where a light is ahead more often than not, so lights are common enough to learn.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import cv2
import numpy as np
from pyquaternion import Quaternion
from shapely.geometry import LineString

from perception.core.geometry import (
    apply_transform,
    box_corners,
    invert_transform,
    pixel_rays,
    polygon_mask,
    project_points,
    rays_to_ground,
    yaw_to_quaternion,
)
from perception.core.progress import progress
from perception.data.lane_projection import project_ground_line
from perception.synthetic.render import GroundRaster, render_camera
from perception.synthetic.traffic import simulate_scene
from perception.synthetic.world import ROAD_HALF_WIDTH, _band, build_world

CAMERA_HEIGHT = 1.35  # metres above the ground
CAMERA_FORWARD = 1.0  # metres ahead of the ego pose
FOCAL_PER_WIDTH = 0.78  # BDD100K's camera: f ~ 1000 px at 1280 px wide
LABEL_RANGE = 80.0  # metres; farther lights and lane markings are not labelled
EGO_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
HOUSING_SIZE = (0.42, 0.36, 1.15)  # must match perception.synthetic.render._light_drawables
DETECTION_CATEGORY = {"vehicle.car": "car", "vehicle.truck": "truck", "vehicle.bus.rigid": "bus",
                      "vehicle.trailer": "truck", "vehicle.construction": "truck", "vehicle.motorcycle": "motorcycle",
                      "vehicle.bicycle": "bicycle", "human.pedestrian.adult": "pedestrian"}
COLOUR_CODE = {"red": "R", "yellow": "Y", "green": "G"}
LIGHT_FRAME_SHARE = 0.7  # frames chosen with a lit light ahead at least MIN_LIGHT_HEIGHT tall
MIN_LIGHT_HEIGHT = 0.035  # of the image height (the housing within ~45 m)


@dataclass
class Bdd100kSyntheticSpec:
    videos: int = 8
    frames_per_video: int = 12
    val_videos: int = 2
    image_size: tuple[int, int] = (640, 360)  # (W, H); BDD100K itself is 1280x720
    seed: int = 0
    locations: tuple[str, ...] = ("berkeley", "new-york")
    train_split: str = "train"
    val_split: str = "val"
    workers: int = 2


def _name(*parts) -> str:
    digest = hashlib.md5(":".join(str(p) for p in parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:16]}.jpg"


def camera_pose(ego_pose: np.ndarray) -> np.ndarray:
    """global_from_camera [4,4] of the front camera for an ego pose (x, y, z, yaw)."""
    x, y, _, yaw = ego_pose
    rotation = Quaternion(yaw_to_quaternion(yaw)).rotation_matrix @ EGO_FROM_OPTICAL
    position = (x + CAMERA_FORWARD * math.cos(yaw), y + CAMERA_FORWARD * math.sin(yaw), CAMERA_HEIGHT)
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = rotation, position
    return pose


def _box_of(corners_cam: np.ndarray, intrinsics: np.ndarray, width: int, height: int) -> list[float] | None:
    if corners_cam[:, 2].min() < 0.5:
        return None
    uv, _ = project_points(corners_cam, intrinsics)
    x0, y0 = np.clip(uv.min(0), 0, [width, height])
    x1, y1 = np.clip(uv.max(0), 0, [width, height])
    if (x1 - x0) < 2 or (y1 - y0) < 3:
        return None
    return [round(float(v), 2) for v in (x0, y0, x1, y1)]


def _hidden(box: list[float], depth: float, occluders: list[np.ndarray], intrinsics: np.ndarray) -> bool:
    """Whether a nearer cuboid (camera-frame corners [8,3]) covers the centre of ``box``."""
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    for corners in occluders:
        front = corners[corners[:, 2] > 0.1]
        if len(front) < 3 or front[:, 2].min() >= depth:
            continue
        uv, _ = project_points(front, intrinsics)
        hull = cv2.convexHull(uv.astype(np.float32))
        if cv2.pointPolygonTest(hull, centre, False) >= 0:
            return True
    return False


def light_labels(world, camera_from_global, intrinsics, width, height, time_s,
                 occluders: list[np.ndarray] = ()) -> list[dict]:
    """Visible lights; ``occluders`` are road users' corners in the camera frame (a hidden light is not labelled)."""
    labels = []
    for light in world.traffic_lights:
        rotation = Quaternion(yaw_to_quaternion(light.yaw)).rotation_matrix
        corners = apply_transform(camera_from_global, box_corners(light.position, HOUSING_SIZE, rotation))
        if np.linalg.norm(corners.mean(0)) > LABEL_RANGE:
            continue
        box = _box_of(corners, intrinsics, width, height)
        if box is None or _hidden(box, float(corners[:, 2].min()), list(occluders), intrinsics):
            continue
        facing = float(np.dot(camera_from_global[:3, :3] @ rotation[:, 0], -corners.mean(0))) > 0
        colour = COLOUR_CODE[light.state(time_s)] if facing else "NA"
        labels.append({"category": "traffic light", "attributes": {"occluded": False, "truncated": False,
                                                                   "trafficLightColor": colour},
                       "box2d": dict(zip(("x1", "y1", "x2", "y2"), box))})
    return labels


def lane_labels(world, global_from_camera, intrinsics, width, height) -> list[dict]:
    labels = []
    for lines, category, style in ((world.lane_dividers, "single white", "dashed"),
                                   (world.road_dividers, "single yellow", "solid"),
                                   (world.road_edges, "road curb", "solid")):
        for line in lines:
            for piece in project_ground_line(np.asarray(line)[:, :2], intrinsics, global_from_camera, 0.0, width,
                                             height, LABEL_RANGE):
                vertices = np.round(np.asarray(LineString(piece).simplify(0.5).coords), 2).tolist()
                labels.append({"category": category, "attributes": {"laneDirection": "parallel", "laneStyle": style},
                               "poly2d": [{"vertices": vertices, "types": "L" * len(vertices), "closed": False}]})
    return labels


class DrivableRaster:
    """World raster at 0.1 m: 0 direct (the ego lane's side of the road), 1 alternative, 2 background."""

    RESOLUTION = 0.1

    def __init__(self, world, ego_lateral: float):
        side = ROAD_HALF_WIDTH if ego_lateral > 0 else -ROAD_HALF_WIDTH
        direct = _band(world.centerline, min(0.0, side), max(0.0, side)).intersection(world.road)
        shape = (int(math.ceil(world.canvas_edge[1] / self.RESOLUTION)),
                 int(math.ceil(world.canvas_edge[0] / self.RESOLUTION)))
        self.raster = np.full(shape, 2, np.uint8)
        self.raster[polygon_mask(shape, world.drivable, resolution=self.RESOLUTION)] = 1
        self.raster[polygon_mask(shape, direct, resolution=self.RESOLUTION)] = 0

    def mask(self, rays: np.ndarray, global_from_camera: np.ndarray) -> np.ndarray:
        points, t = rays_to_ground(rays, global_from_camera)
        mask = np.full(rays.shape[:2], 2, np.uint8)
        hits = t > 0
        cells = np.floor(points[hits][:, :2] / self.RESOLUTION).astype(np.int64)
        inside = (cells[:, 0] >= 0) & (cells[:, 1] >= 0) & (cells[:, 0] < self.raster.shape[1]) & \
                 (cells[:, 1] < self.raster.shape[0])
        values = np.full(len(cells), 2, np.uint8)
        values[inside] = self.raster[cells[inside, 1], cells[inside, 0]]
        mask[hits] = values
        return mask


def _video_job(args) -> tuple[str, list[dict], list[dict]]:
    """Simulate one drive, pick and render its frames; returns (split, detection frames, lane frames)."""
    spec, out_dir, video, split, world_seed, location = args
    world = build_world(location, np.random.default_rng(world_seed))
    ground = GroundRaster(world, np.random.default_rng(world_seed))
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 2000 + video]))
    times = 100.0 + np.arange(90) * 1.0 + rng.uniform(0, 60)
    ego_lane = int(rng.integers(len(world.lanes)))
    tracks = simulate_scene(world, rng, times, ego_lane=ego_lane)
    tints = rng.uniform(0.75, 1.2, size=len(tracks))
    width, height = spec.image_size
    focal = FOCAL_PER_WIDTH * width
    intrinsics = np.array([[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]])
    rays = pixel_rays(intrinsics, height, width)

    poses = [camera_pose(tracks[0].poses[k]) for k in range(len(times))]
    with_light = [k for k, pose in enumerate(poses)
                  if any(label["attributes"]["trafficLightColor"] != "NA"
                         and label["box2d"]["y2"] - label["box2d"]["y1"] >= MIN_LIGHT_HEIGHT * height for label in
                         light_labels(world, invert_transform(pose), intrinsics, width, height, times[k]))]
    others = [k for k in range(len(times)) if k not in with_light]
    n_light = min(len(with_light), int(round(spec.frames_per_video * LIGHT_FRAME_SHARE)))
    chosen = list(rng.choice(with_light, n_light, replace=False)) if n_light else []
    chosen += list(rng.choice(others, min(len(others), spec.frames_per_video - n_light), replace=False))
    drivable = DrivableRaster(world, world.lanes[ego_lane].lateral)

    image_dir = os.path.join(out_dir, "images", "100k", split)
    mask_dir = os.path.join(out_dir, "labels", "drivable", "masks", split)
    detection_frames, lane_frames = [], []
    for k in sorted(int(c) for c in chosen):
        name = _name(spec.seed, video, k)
        global_from_camera = poses[k]
        camera_from_global = invert_transform(global_from_camera)
        objects, boxes, occluders = [], [], []
        for i, track in enumerate(tracks[1:], start=1):
            x, y, z, yaw = track.poses[k]
            corners = box_corners((x, y, z), track.size_wlh, Quaternion(yaw_to_quaternion(yaw)).rotation_matrix)
            objects.append((corners, track.category, tints[i]))
            occluders.append(apply_transform(camera_from_global, corners))
            category = DETECTION_CATEGORY.get(track.category)
            box = _box_of(apply_transform(camera_from_global, corners), intrinsics, width, height) if category else None
            if box is not None and math.hypot(x - global_from_camera[0, 3], y - global_from_camera[1, 3]) < LABEL_RANGE:
                boxes.append({"category": category, "attributes": {"occluded": False, "truncated": False},
                              "box2d": dict(zip(("x1", "y1", "x2", "y2"), box))})
        image = render_camera(ground, world, intrinsics, global_from_camera, width, height, objects, float(times[k]),
                              rays=rays)
        cv2.imwrite(os.path.join(image_dir, name), image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
        cv2.imwrite(os.path.join(mask_dir, name.replace(".jpg", ".png")), drivable.mask(rays, global_from_camera))
        frame = {"name": name, "attributes": {"weather": "clear", "scene": "city street", "timeofday": "daytime"},
                 "timestamp": 10000}
        labels = boxes + light_labels(world, camera_from_global, intrinsics, width, height, float(times[k]),
                                      occluders)
        detection_frames.append(frame | {"labels": [{"id": str(j)} | label for j, label in enumerate(labels)]})
        lanes = lane_labels(world, global_from_camera, intrinsics, width, height)
        lane_frames.append(frame | {"labels": [{"id": str(j)} | label for j, label in enumerate(lanes)]})
    return split, detection_frames, lane_frames


def write_synthetic_bdd100k(out_dir: str, spec: Bdd100kSyntheticSpec) -> dict:
    """Generate the dataset; returns frame counts per split. Deterministic for a given spec."""
    out_dir = os.path.abspath(out_dir)
    if not 0 < spec.val_videos < spec.videos:
        raise ValueError(f"val_videos must be in [1, videos - 1], got {spec.val_videos} of {spec.videos}")
    splits = [spec.train_split] * (spec.videos - spec.val_videos) + [spec.val_split] * spec.val_videos
    for split in set(splits):
        os.makedirs(os.path.join(out_dir, "images", "100k", split), exist_ok=True)
        os.makedirs(os.path.join(out_dir, "labels", "drivable", "masks", split), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "labels", "det_20"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "labels", "lane", "polygons"), exist_ok=True)
    # Worlds of their own: seeds offset from the synthetic nuScenes generator's.
    seeds = {loc: int(np.random.SeedSequence([spec.seed, 7919, i]).generate_state(1)[0])
             for i, loc in enumerate(spec.locations)}
    jobs = [(spec, out_dir, v, splits[v], seeds[spec.locations[v % len(spec.locations)]],
             spec.locations[v % len(spec.locations)]) for v in range(spec.videos)]
    if spec.workers > 1:
        with ProcessPoolExecutor(spec.workers) as pool:
            results = list(progress(pool.map(_video_job, jobs), "synthetic BDD100K", len(jobs), "drive"))
    else:
        results = [_video_job(job) for job in progress(jobs, "synthetic BDD100K", unit="drive")]
    counts = {}
    for split in dict.fromkeys(splits):
        detection = [f for s, d, _ in results if s == split for f in d]
        lanes = [f for s, _, lane in results if s == split for f in lane]
        with open(os.path.join(out_dir, "labels", "det_20", f"det_{split}.json"), "w") as f:
            json.dump(detection, f)
        with open(os.path.join(out_dir, "labels", "lane", "polygons", f"lane_{split}.json"), "w") as f:
            json.dump(lanes, f)
        counts[split] = len(detection)
    with open(os.path.join(out_dir, ".complete"), "w") as f:
        json.dump({"spec": vars(spec), "frames": counts}, f, indent=1, default=list)
    return counts
