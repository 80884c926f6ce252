"""Write a synthetic dataset in the nuScenes v1.0 on-disk layout.

<out>/<version>/*.json      the 13 tables, plus splits.json (custom splits)
<out>/samples/CAM_*/...jpg  keyframe images rendered from the same geometry as the labels
<out>/maps/<token>.png      the map table's raster (drivable area, 10 px/m)
<out>/maps/expansion/<location>.json  map expansion v1.3
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

from perception.core.geometry import (
    apply_transform,
    box_corners,
    invert_transform,
    pixel_rays,
    transform_matrix,
    yaw_to_quaternion,
)
from perception.core.nuscenes_constants import ATTRIBUTES, CATEGORIES, VISIBILITY_LEVELS
from perception.core.progress import progress
from perception.data.occlusion import visible_pixels
from perception.synthetic.annotation_fields import (
    annotation_attribute,
    distance_visibility,
    lidar_points,
    set_rendered_visibility,
)
from perception.synthetic.map_expansion import map_expansion_json
from perception.synthetic.prediction_scenes import prediction_scenes
from perception.synthetic.render import RASTER_RESOLUTION, GroundRaster, render_camera
from perception.synthetic.traffic import simulate_scene
from perception.synthetic.world import MapWorld, build_world

# name: (yaw of the optical axis in the ego frame [deg], position in the ego frame [m], focal at 1600 px width)
CAMERA_RIG = {
    "CAM_FRONT": (0.0, (1.70, 0.00, 1.51), 1266.0),
    "CAM_FRONT_RIGHT": (-55.0, (1.55, -0.49, 1.49), 1260.0),
    "CAM_BACK_RIGHT": (-110.0, (1.04, -0.48, 1.56), 1259.0),
    "CAM_BACK": (180.0, (0.03, 0.00, 1.57), 809.0),
    "CAM_BACK_LEFT": (110.0, (1.03, 0.48, 1.56), 1256.0),
    "CAM_FRONT_LEFT": (55.0, (1.52, 0.49, 1.51), 1257.0),
}
LIDAR_POSITION = (0.94, 0.0, 1.84)
# Optical frame (x right, y down, z forward) expressed in a forward-looking ego frame.
EGO_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
ANNOTATION_RANGE = 60.0  # metres from the ego car; nuScenes annotates roughly the lidar range
KEYFRAME_INTERVAL_US = 500_000  # 2 Hz


@dataclass
class SyntheticSpec:
    scenes: int = 10
    samples_per_scene: int = 16
    cameras: int = 6
    image_size: tuple[int, int] = (800, 450)  # (W, H)
    val_scenes: int = 2
    seed: int = 0
    version: str = "v1.0-trainval"
    locations: tuple[str, ...] = ("boston-seaport", "singapore-onenorth")
    scene_names: tuple[str, ...] | None = None  # default scene-0001, ...
    train_split: str = "synthetic_train"
    val_split: str = "synthetic_val"
    workers: int = 2

    def camera_names(self) -> list[str]:
        if self.cameras == 6:
            return list(CAMERA_RIG)
        if self.cameras == 1:
            return ["CAM_FRONT"]
        if self.cameras == 0:  # tables, maps and LIDAR_TOP records only: motion data needs no images
            return []
        raise ValueError(f"cameras must be 0, 1 or 6, got {self.cameras}")


def _token(*parts) -> str:
    return hashlib.md5(":".join(str(p) for p in parts).encode()).hexdigest()


def camera_calibration(name: str, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(intrinsics [3,3] at this image size, ego_from_camera [4,4]) of one rig camera."""
    yaw_deg, position, focal_1600 = CAMERA_RIG[name]
    focal = focal_1600 * width / 1600.0
    intrinsics = np.array([[focal, 0.0, width / 2.0], [0.0, focal, height / 2.0], [0.0, 0.0, 1.0]])
    yaw = math.radians(yaw_deg)
    rz = np.array([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]])
    ego_from_camera = np.eye(4)
    ego_from_camera[:3, :3] = rz @ EGO_FROM_OPTICAL
    ego_from_camera[:3, 3] = position
    return intrinsics, ego_from_camera


def _scene_job(args) -> dict:
    """Simulate and render one scene; returns its table records (written by the parent)."""
    spec, scene_index, world_seed, location = args
    world = build_world(location, np.random.default_rng(world_seed))
    ground = GroundRaster(world, np.random.default_rng(world_seed))
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 1000 + scene_index]))
    names = spec.scene_names or tuple(f"scene-{i + 1:04d}" for i in range(spec.scenes))
    scene_name = names[scene_index]
    times = 100.0 + np.arange(spec.samples_per_scene) * KEYFRAME_INTERVAL_US / 1e6 + rng.uniform(0, 60)
    ego_lane = int(rng.integers(len(world.lanes)))
    tracks = simulate_scene(world, rng, times, ego_lane=ego_lane)
    tints = rng.uniform(0.75, 1.2, size=len(tracks))
    log_token = _token(spec.seed, "log", scene_index)
    log_name = f"n{900 + spec.seed % 100:03d}-2026-01-{scene_index % 28 + 1:02d}-10-00-{scene_index % 60:02d}+0000"
    base_us = 1_700_000_000_000_000 + scene_index * 3_600_000_000
    width, height = spec.image_size
    cameras = spec.camera_names()
    calibration = {c: camera_calibration(c, width, height) for c in cameras}
    rays = {c: pixel_rays(calibration[c][0], height, width) for c in cameras}

    rec = {k: [] for k in ("calibrated_sensor", "ego_pose", "sample", "sample_data", "sample_annotation", "instance")}
    calib_tokens = {}
    for channel in cameras + ["LIDAR_TOP"]:
        token = _token(spec.seed, "calib", scene_index, channel)
        calib_tokens[channel] = token
        if channel == "LIDAR_TOP":
            rec["calibrated_sensor"].append({"token": token, "sensor_token": _token("sensor", channel),
                                             "translation": list(LIDAR_POSITION), "rotation": [1.0, 0.0, 0.0, 0.0],
                                             "camera_intrinsic": []})
        else:
            intrinsics, ego_from_camera = calibration[channel]
            rec["calibrated_sensor"].append({
                "token": token, "sensor_token": _token("sensor", channel),
                "translation": ego_from_camera[:3, 3].tolist(),
                "rotation": list(Quaternion(matrix=ego_from_camera[:3, :3]).elements),
                "camera_intrinsic": intrinsics.tolist()})

    sample_tokens = [_token(spec.seed, "sample", scene_index, k) for k in range(len(times))]
    sd_prev = {c: "" for c in cameras + ["LIDAR_TOP"]}
    sd_records_by_channel = {c: [] for c in cameras + ["LIDAR_TOP"]}
    ann_by_track: dict[int, list[dict]] = {}
    os.makedirs(os.path.join(spec._out, "samples"), exist_ok=True)
    for k, t in enumerate(times):
        timestamp = base_us + int(round((t - times[0]) * 1e6))
        rec["sample"].append({"token": sample_tokens[k], "timestamp": timestamp,
                              "prev": sample_tokens[k - 1] if k else "",
                              "next": sample_tokens[k + 1] if k + 1 < len(times) else "",
                              "scene_token": _token(spec.seed, "scene", scene_index)})
        ego = tracks[0].poses[k]
        global_from_ego = transform_matrix(yaw_to_quaternion(ego[3]), (ego[0], ego[1], 0.0))
        objects, object_tracks, annotated_now = [], [], {}
        for i, track in enumerate(tracks[1:], start=1):
            x, y, z, yaw = track.poses[k]
            distance = math.hypot(x - ego[0], y - ego[1])
            if distance > 150:
                continue
            rotation = Quaternion(yaw_to_quaternion(yaw)).rotation_matrix
            objects.append((box_corners((x, y, z), track.size_wlh, rotation), track.category, tints[i]))
            object_tracks.append(i)
            if distance <= ANNOTATION_RANGE:
                annotated_now[i] = dict(
                    k=k, translation=[float(x), float(y), float(z)], size=list(track.size_wlh),
                    rotation=yaw_to_quaternion(yaw), attribute=annotation_attribute(track, track.speed[k]),
                    num_lidar_pts=lidar_points(track.size_wlh, distance), visibility=distance_visibility(distance))
                ann_by_track.setdefault(i, []).append(annotated_now[i])
        # Pixels of each object seen / in view, summed over the cameras (see set_rendered_visibility).
        seen, in_view = np.zeros(len(objects), np.int64), np.zeros(len(objects), np.int64)
        for channel in cameras + ["LIDAR_TOP"]:
            sd_token = _token(spec.seed, "sd", scene_index, k, channel)
            rec["ego_pose"].append({"token": sd_token, "timestamp": timestamp,
                                    "translation": [float(ego[0]), float(ego[1]), 0.0],
                                    "rotation": yaw_to_quaternion(ego[3])})
            if channel == "LIDAR_TOP":
                filename = f"samples/LIDAR_TOP/{log_name}__LIDAR_TOP__{timestamp}.pcd.bin"
                fileformat, w, h = "pcd", 0, 0
            else:
                filename = f"samples/{channel}/{log_name}__{channel}__{timestamp}.jpg"
                fileformat, w, h = "jpg", width, height
                intrinsics, ego_from_camera = calibration[channel]
                image = render_camera(ground, world, intrinsics, global_from_ego @ ego_from_camera, width, height,
                                      objects, float(t), rays=rays[channel])
                path = os.path.join(spec._out, filename)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                cv2.imwrite(path, image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
                cam_from_global = invert_transform(global_from_ego @ ego_from_camera)
                visible, footprint = visible_pixels([apply_transform(cam_from_global, o[0]) for o in objects],
                                                    intrinsics, width, height)
                seen += visible
                in_view += footprint
            record = {"token": sd_token, "sample_token": sample_tokens[k], "ego_pose_token": sd_token,
                      "calibrated_sensor_token": calib_tokens[channel], "timestamp": timestamp,
                      "fileformat": fileformat, "is_key_frame": True, "height": h, "width": w,
                      "filename": filename, "prev": sd_prev[channel], "next": ""}
            if sd_records_by_channel[channel]:
                sd_records_by_channel[channel][-1]["next"] = sd_token
            sd_records_by_channel[channel].append(record)
            sd_prev[channel] = sd_token
        if cameras:
            for j, i in enumerate(object_tracks):
                if i in annotated_now:
                    set_rendered_visibility(annotated_now[i], seen[j], in_view[j])
    for channel_records in sd_records_by_channel.values():
        rec["sample_data"].extend(channel_records)

    # One instance per contiguous run of annotated keyframes of a track.
    for i, anns in ann_by_track.items():
        runs, current = [], [anns[0]]
        for a in anns[1:]:
            if a["k"] == current[-1]["k"] + 1:
                current.append(a)
            else:
                runs.append(current)
                current = [a]
        runs.append(current)
        for r, run in enumerate(runs):
            instance = _token(spec.seed, "instance", scene_index, i, r)
            tokens = [_token(spec.seed, "ann", scene_index, i, a["k"]) for a in run]
            for j, a in enumerate(run):
                rec["sample_annotation"].append({
                    "token": tokens[j], "sample_token": sample_tokens[a["k"]], "instance_token": instance,
                    "visibility_token": a["visibility"],
                    "attribute_tokens": [_token("attribute", a["attribute"])] if a["attribute"] else [],
                    "translation": a["translation"], "size": a["size"], "rotation": a["rotation"],
                    "prev": tokens[j - 1] if j else "", "next": tokens[j + 1] if j + 1 < len(run) else "",
                    "num_lidar_pts": a["num_lidar_pts"], "num_radar_pts": 0})
            rec["instance"].append({"token": instance, "category_token": _token("category", tracks[i].category),
                                    "nbr_annotations": len(run), "first_annotation_token": tokens[0],
                                    "last_annotation_token": tokens[-1]})
    rec["scene"] = {"token": _token(spec.seed, "scene", scene_index), "log_token": log_token,
                    "nbr_samples": len(times), "first_sample_token": sample_tokens[0],
                    "last_sample_token": sample_tokens[-1], "name": scene_name,
                    "description": f"synthetic {location}, ego lane {ego_lane}"}
    rec["log"] = {"token": log_token, "logfile": log_name, "vehicle": "n900", "date_captured": "2026-01-01",
                  "location": location}
    return rec


def write_synthetic_nuscenes(out_dir: str, spec: SyntheticSpec) -> dict:
    """Generate the dataset; returns a summary (counts). Deterministic for a given spec."""
    out_dir = os.path.abspath(out_dir)
    spec._out = out_dir  # noqa: SLF001 - carried to the workers with the spec
    if spec.scene_names is not None and len(spec.scene_names) != spec.scenes:
        raise ValueError(f"{len(spec.scene_names)} scene names given for {spec.scenes} scenes")
    if not 0 < spec.val_scenes < spec.scenes:
        raise ValueError(f"val_scenes must be in [1, scenes - 1], got {spec.val_scenes} of {spec.scenes}")
    table_dir = os.path.join(out_dir, spec.version)
    os.makedirs(table_dir, exist_ok=True)
    os.makedirs(os.path.join(out_dir, "maps", "expansion"), exist_ok=True)

    locations = list(spec.locations)
    world_seeds = {loc: int(np.random.SeedSequence([spec.seed, i]).generate_state(1)[0]) for i, loc in
                   enumerate(locations)}
    jobs = [(spec, i, world_seeds[locations[i % len(locations)]], locations[i % len(locations)])
            for i in range(spec.scenes)]
    if spec.workers > 1:
        with ProcessPoolExecutor(spec.workers) as pool:
            scenes = list(progress(pool.map(_scene_job, jobs), "synthetic nuScenes", len(jobs), "scene"))
    else:
        scenes = [_scene_job(job) for job in progress(jobs, "synthetic nuScenes", unit="scene")]

    tables: dict[str, list] = {name: [] for name in (
        "category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
        "scene", "sample", "sample_data", "sample_annotation", "map")}
    tables["category"] = [{"token": _token("category", n), "name": n, "description": d, "index": i}
                          for i, (n, d) in enumerate(CATEGORIES)]
    tables["attribute"] = [{"token": _token("attribute", n), "name": n, "description": d} for n, d in ATTRIBUTES]
    tables["visibility"] = [{"token": t, "level": lvl, "description": d} for t, lvl, d in VISIBILITY_LEVELS]
    tables["sensor"] = [{"token": _token("sensor", c), "channel": c, "modality": "camera"} for c in CAMERA_RIG]
    tables["sensor"].append({"token": _token("sensor", "LIDAR_TOP"), "channel": "LIDAR_TOP", "modality": "lidar"})
    for scene in scenes:
        for name in ("calibrated_sensor", "ego_pose", "sample", "sample_data", "sample_annotation", "instance"):
            tables[name].extend(scene[name])
        tables["scene"].append(scene["scene"])
        tables["log"].append(scene["log"])

    for location in locations:
        logs = [s["log"]["token"] for s in scenes if s["log"]["location"] == location]
        if not logs:
            continue
        world = build_world(location, np.random.default_rng(world_seeds[location]))
        map_token = _token(spec.seed, "map", location)
        filename = f"maps/{map_token}.png"
        raster = GroundRaster(world, np.random.default_rng(0)).raster
        drivable = np.where((raster == 1) | (raster == 3) | (raster >= 4), 255, 0).astype(np.uint8)
        cv2.imwrite(os.path.join(out_dir, filename), drivable[::-1])  # image rows run north to south
        tables["map"].append({"token": map_token, "log_tokens": logs, "category": "semantic_prior",
                              "filename": filename})
        with open(os.path.join(out_dir, "maps", "expansion", f"{location}.json"), "w") as f:
            json.dump(map_expansion_json(world), f)
    assert RASTER_RESOLUTION == 0.1  # the map table's raster is read by the devkit at 10 px/m

    for name, records in tables.items():
        with open(os.path.join(table_dir, f"{name}.json"), "w") as f:
            json.dump(records, f, indent=0)
    names = [s["scene"]["name"] for s in scenes]
    splits = {spec.train_split: names[: spec.scenes - spec.val_scenes], spec.val_split: names[-spec.val_scenes:]}
    with open(os.path.join(table_dir, "splits.json"), "w") as f:
        json.dump(splits, f, indent=1)
    # The devkit's prediction challenge file, {scene name: ["<instance>_<sample>", ...]}.
    os.makedirs(os.path.join(out_dir, "maps", "prediction"), exist_ok=True)
    with open(os.path.join(out_dir, "maps", "prediction", "prediction_scenes.json"), "w") as f:
        json.dump(prediction_scenes(tables), f)
    summary = {name: len(records) for name, records in tables.items()}
    with open(os.path.join(out_dir, ".complete"), "w") as f:
        json.dump({"spec": {k: v for k, v in vars(spec).items() if not k.startswith("_")}, "counts": summary}, f,
                  indent=1, default=list)
    return summary


def build_worlds(spec: SyntheticSpec) -> dict[str, MapWorld]:
    """The worlds a spec generates (for tests that compare labels with the geometry)."""
    seeds = [int(np.random.SeedSequence([spec.seed, i]).generate_state(1)[0]) for i in range(len(spec.locations))]
    return {loc: build_world(loc, np.random.default_rng(seed)) for loc, seed in zip(spec.locations, seeds)}
