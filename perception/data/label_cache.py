"""Labels extracted once from nuScenes with the devkit into a versioned, stamped cache.

Layout: <cache_root>/<version>/<split>/{meta.json, infos.json, masks/<sample_data_token>.npy} (masks as
run lengths, perception.data.mask_codec).
``meta.json`` records what the cache was built from (dataset root, table fingerprints,
settings, format version). Loading checks it: a cache built from other data or settings
is an error that says how to rebuild, never silently used; so is a cache whose mask files
are not all there.

Concurrent builders (two tools, the nodes of a multi-node job on a shared filesystem) never
race: a build holds an exclusive file lock (``<cache_root>/<version>/.<split>.lock``, flock, which
Linux maps onto POSIX locks on NFS), stages into its own folder and renames it into place; a
builder that waited for the lock finds the cache built and does not build it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import multiprocessing
import os
import shutil
import socket
import time

import cv2
import numpy as np
from pyquaternion import Quaternion

from perception.core.errors import PerceptionError
from perception.core.geometry import box_corners, invert_transform, project_points, transform_matrix
from perception.core.nuscenes_constants import CAMERAS, CATEGORY_TO_DETECTION, DETECTION_CLASSES
from perception.core.progress import progress
from perception.data.drivable_projection import DrivableRasterizer, project_drivable_mask
from perception.data.lane_projection import MapLines, project_lane_lines
from perception.data.mask_codec import write_mask
from perception.data.occlusion import NEAR_PLANE, clipped_box_xyxy, visible_fractions
from perception.data.splits import scenes_of_split
from perception.data.tables import check_inside_root

# 2: drivable masks as run lengths (.npy) instead of PNG; 3: map-derived lane polylines;
# 4: per-camera visible fraction of every obstacle, near-plane-clipped 2D boxes
CACHE_FORMAT = 4
MAX_WORKERS = 8  # label-cache processes at most: a 64-core node does not fork 64 copies of the tables
FINGERPRINT_TABLES = ("scene", "sample", "sample_data", "sample_annotation", "calibrated_sensor", "ego_pose", "log")


class StaleCacheError(PerceptionError, RuntimeError):
    pass


def rebuild_command(config_path: str, cfg_options: dict) -> str:
    """The exact command that rebuilds the caches of a run started with these ``--cfg-options``."""
    import shlex

    options = [f"{k}={json.dumps(v) if isinstance(v, (list, tuple, dict)) else v}" for k, v in cfg_options.items()]
    command = ["python", "tools/build_label_cache.py", config_path, "--force"]
    return shlex.join(command + (["--cfg-options", *options] if options else []))


@contextlib.contextmanager
def build_lock(cache_root: str, version: str, split: str):
    """Exclusive lock on building one split's cache (blocks while another process holds it)."""
    directory = os.path.join(cache_root, version)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f".{split}.lock"), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"label cache {directory}/{split}: another process is building it; waiting", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def default_cache_root(data_root: str) -> str:
    return os.path.join(data_root, "perception_cache")


def cache_dir(cache_root: str, version: str, split: str) -> str:
    return os.path.join(cache_root, version, split)


def file_stamp(path: str) -> list:
    stat = os.stat(path)
    return [os.path.basename(path), stat.st_size, int(stat.st_mtime)]


def source_stamps(data_root: str, version: str, map_expansion: bool = True, extra: tuple[str, ...] = ()) -> list:
    """Stamps of what a cache is built from: the fingerprint tables, the map expansion JSONs (if
    used), ``splits.json`` and ``extra`` files (relative to data_root) where they exist."""
    tables = os.path.join(data_root, version)
    stamps = [file_stamp(os.path.join(tables, f"{t}.json")) for t in FINGERPRINT_TABLES]
    expansion = os.path.join(data_root, "maps", "expansion")
    if map_expansion and os.path.isdir(expansion):
        stamps += [file_stamp(os.path.join(expansion, f)) for f in sorted(os.listdir(expansion))
                   if f.endswith(".json")]
    for path in [os.path.join(tables, "splits.json")] + [os.path.join(data_root, e) for e in extra]:
        if os.path.isfile(path):
            stamps.append(file_stamp(path))
    return stamps


def cache_key(data_root: str, version: str, split: str, cameras, drivable_max_range: float) -> dict:
    data_root = os.path.abspath(data_root)
    return {"format": CACHE_FORMAT, "data_root": data_root, "version": version, "split": split,
            "cameras": list(cameras), "drivable_max_range": float(drivable_max_range),
            "classes": list(DETECTION_CLASSES), "source_files": source_stamps(data_root, version)}


def load_label_cache(data_root: str, version: str, split: str, cameras, cache_root: str,
                     drivable_max_range: float) -> tuple[list[dict], str]:
    """(infos, cache directory); raises FileNotFoundError if missing, StaleCacheError if stale."""
    directory = cache_dir(cache_root, version, split)
    meta_path = os.path.join(directory, "meta.json")
    if not os.path.isfile(meta_path):
        raise FileNotFoundError(meta_path)
    with open(meta_path) as f:
        meta = json.load(f)
    expected = cache_key(data_root, version, split, cameras, drivable_max_range)
    differences = [k for k in expected if meta.get("key", {}).get(k) != expected[k]]
    if differences:
        details = "; ".join(f"{k}: cache has {meta.get('key', {}).get(k)!r}, config needs {expected[k]!r}"
                            for k in differences[:3])
        raise StaleCacheError(
            f"label cache {directory} was built from other data or settings ({details}). {_rebuild_advice(split)}")
    with open(os.path.join(directory, "infos.json")) as f:
        infos = json.load(f)
    masks = os.path.join(directory, "masks")
    present = set(os.listdir(masks)) if os.path.isdir(masks) else set()
    missing = [i["drivable_mask"] for i in infos if os.path.basename(i["drivable_mask"]) not in present]
    if missing or len(infos) != meta.get("num_infos"):
        raise StaleCacheError(
            f"label cache {directory} is incomplete ({len(missing)} of {len(infos)} masks missing, e.g. "
            f"{missing[:2]}; {len(infos)} records, meta.json says {meta.get('num_infos')}). {_rebuild_advice(split)}")
    return infos, directory


def _rebuild_advice(split: str) -> str:
    return (f"Rebuild it with `python tools/build_label_cache.py CONFIG --split {split} --force` or delete the "
            "directory.")


def build_label_cache(data_root: str, version: str, split: str, cameras, cache_root: str,
                      drivable_max_range: float = 60.0, nusc=None, verbose: bool = True,
                      only_if_missing: bool = False, workers: int | None = None) -> str:
    """Extract every (sample, camera) of ``split`` into the cache; returns the cache directory.

    Holds the split's build lock throughout. ``only_if_missing``: after getting the lock, keep a
    cache that is there and up to date (another process built it while this one waited).
    ``workers``: processes extracting scenes in parallel (default: the cores this process may use, at
    most ``MAX_WORKERS``); the cache is the same for any number."""
    with build_lock(cache_root, version, split):
        if only_if_missing:
            try:
                return load_label_cache(data_root, version, split, cameras, cache_root, drivable_max_range)[1]
            except FileNotFoundError:
                pass
        return _build(data_root, version, split, cameras, cache_root, drivable_max_range, nusc, verbose, workers)


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a SLURM allocation), at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


def _build(data_root: str, version: str, split: str, cameras, cache_root: str, drivable_max_range: float, nusc,
           verbose: bool, workers: int | None) -> str:
    from perception.data.tables import load_nuscenes

    start = time.time()
    data_root = os.path.abspath(data_root)
    unknown = [c for c in cameras if c not in CAMERAS]
    if unknown:
        raise ValueError(f"unknown camera names {unknown}; nuScenes cameras are {list(CAMERAS)}")
    if nusc is None:
        nusc = load_nuscenes(data_root, version)
    scene_names = set(scenes_of_split(data_root, version, split))
    known = {s["name"] for s in nusc.scene}
    missing = sorted(scene_names - known)
    if len(missing) == len(scene_names):
        raise ValueError(f"none of the {len(scene_names)} scenes of split {split!r} exist in {data_root}/{version} "
                         f"(e.g. {missing[:3]}); is version or data_root wrong?")
    directory = cache_dir(cache_root, version, split)
    # This process's own staging folder: a crashed builder's leftovers never mix with it.
    staging = f"{directory}.building-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(os.path.join(staging, "masks"))

    scenes = [scene for scene in nusc.scene if scene["name"] in scene_names]
    job = _SceneExtraction(nusc, data_root, scenes, list(cameras), staging, drivable_max_range)
    workers = min(workers or default_workers(), len(scenes))
    per_scene = _run_scenes(job, len(scenes), workers)
    infos = [info for scene_infos in progress(per_scene, f"label cache {split}", len(scenes), "scene")
             for info in scene_infos]

    key = cache_key(data_root, version, split, cameras, drivable_max_range)
    with open(os.path.join(staging, "infos.json"), "w") as f:
        json.dump(infos, f)
    with open(os.path.join(staging, "meta.json"), "w") as f:
        json.dump({"key": key, "num_infos": len(infos), "built_at": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
    # Move the old cache aside, rename the new one in, then delete the old: a reader sees either.
    retired = f"{staging}.old"
    if os.path.isdir(directory):
        os.replace(directory, retired)
    os.replace(staging, directory)
    shutil.rmtree(retired, ignore_errors=True)
    if verbose:
        print(f"label cache: {len(infos)} camera images of split {split!r} -> {directory} "
              f"({time.time() - start:.1f} s)")
    return directory


class _SceneExtraction:
    """Extracts one scene's camera records (``scene_infos``); the maps are opened once per process."""

    def __init__(self, nusc, data_root: str, scenes: list[dict], cameras: list[str], staging: str, max_range: float):
        self.nusc, self.data_root, self.scenes, self.cameras = nusc, data_root, scenes, cameras
        self.staging, self.max_range = staging, max_range
        self.maps: dict[str, tuple[DrivableRasterizer, MapLines]] = {}

    def scene_infos(self, index: int) -> list[dict]:
        from nuscenes.map_expansion.map_api import NuScenesMap

        nusc, scene = self.nusc, self.scenes[index]
        location = nusc.get("log", scene["log_token"])["location"]
        if location not in self.maps:
            nusc_map = NuScenesMap(dataroot=self.data_root, map_name=location)
            self.maps[location] = DrivableRasterizer(nusc_map), MapLines(nusc_map)
        rasterizer, map_lines = self.maps[location]
        infos = []
        sample_token = scene["first_sample_token"]
        while sample_token:
            sample = nusc.get("sample", sample_token)
            for camera in self.cameras:
                info = _camera_info(nusc, sample, camera, scene["name"], rasterizer, map_lines, self.staging,
                                    self.max_range)
                info["location"] = location
                infos.append(info)
            sample_token = sample["next"]
        return infos


# The extraction the forked workers run (inherited from the parent, not pickled: the devkit's tables can be GBs).
_WORKER_JOB: _SceneExtraction | None = None


def _worker_scene_infos(index: int) -> list[dict]:
    return _WORKER_JOB.scene_infos(index)


def _run_scenes(job: _SceneExtraction, count: int, workers: int):
    """Every scene's records, in scene order: in this process, or in ``workers`` forked processes (Linux; the
    tables are shared copy-on-write). Each scene writes only its own mask files."""
    global _WORKER_JOB
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield from (job.scene_infos(i) for i in range(count))
        return
    _WORKER_JOB = job
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            yield from pool.imap(_worker_scene_infos, range(count))
    finally:
        _WORKER_JOB = None


def _camera_info(nusc, sample: dict, camera: str, scene_name: str, rasterizer: DrivableRasterizer,
                 map_lines: MapLines, staging: str, max_range: float) -> dict:
    sd = nusc.get("sample_data", sample["data"][camera])
    filename = check_inside_root(sd["filename"], f"sample_data {sd['token']}: filename (sample_data.json)")
    calib = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
    pose = nusc.get("ego_pose", sd["ego_pose_token"])
    intrinsics = np.array(calib["camera_intrinsic"], dtype=np.float64)
    ego_from_camera = transform_matrix(calib["rotation"], calib["translation"])
    global_from_ego = transform_matrix(pose["rotation"], pose["translation"])
    global_from_camera = global_from_ego @ ego_from_camera
    width, height = int(sd["width"]), int(sd["height"])
    if width <= 0 or height <= 0:
        image = cv2.imread(os.path.join(nusc.dataroot, filename), cv2.IMREAD_UNCHANGED)
        if image is None:
            raise FileNotFoundError(f"camera image {os.path.join(nusc.dataroot, filename)} "
                                    "is missing or unreadable and its sample_data record has no width/height")
        height, width = image.shape[:2]

    mask = project_drivable_mask(rasterizer, intrinsics, global_from_camera, float(pose["translation"][2]),
                                 width, height, max_range)
    mask_name = f"masks/{sd['token']}.npy"
    write_mask(os.path.join(staging, mask_name), mask)

    lanes = project_lane_lines(map_lines, intrinsics, global_from_camera, float(pose["translation"][2]), width, height,
                               max_range)
    obstacles = _obstacles_in_camera(nusc, sample, intrinsics, invert_transform(global_from_camera), width, height)
    return {
        "sample_token": sample["token"], "sample_data_token": sd["token"], "camera": camera,
        "scene_name": scene_name, "timestamp": sd["timestamp"], "image_path": filename,
        "image_size": [width, height], "intrinsics": intrinsics.tolist(),
        "ego_from_camera": ego_from_camera.tolist(), "global_from_ego": global_from_ego.tolist(),
        "drivable_mask": mask_name, "obstacles": obstacles, "lanes": lanes,
    }


def _obstacles_in_camera(nusc, sample, intrinsics, camera_from_global, width, height) -> dict:
    """Boxes of the sample seen by this camera, in the camera frame (x right, y down, z forward).

    yaw_cam: heading of the box's length axis in the camera x-z plane, atan2(h_x, h_z) (0 = facing
    along the optical axis, +pi/2 = facing right). velocity_cam: (v_x, v_z) in m/s.
    box2d_xyxy: extent of the near-plane-clipped box (perception.data.occlusion). visible_fraction:
    the share of its silhouette in this image that no nearer annotated box hides (every annotation
    occludes, detection class or not); the dataset drops targets below its min_visibility.
    """
    fields = {k: [] for k in ("center_cam", "size_wlh", "yaw_cam", "velocity_cam", "box2d_xyxy", "center_uv",
                              "label", "attribute", "num_lidar_pts", "visibility", "visible_fraction",
                              "annotation_token")}
    rotation = camera_from_global[:3, :3]
    annotations, corners = [], []
    for ann_token in sample["anns"]:
        ann = nusc.get("sample_annotation", ann_token)
        centre = rotation @ np.asarray(ann["translation"]) + camera_from_global[:3, 3]
        box_rotation = rotation @ Quaternion(ann["rotation"]).rotation_matrix
        box = box_corners(centre, ann["size"], box_rotation)
        if box[:, 2].max() < NEAR_PLANE:
            continue
        annotations.append((ann_token, ann, centre, box_rotation))
        corners.append(box)
    fractions = visible_fractions(corners, intrinsics, width, height)
    for (ann_token, ann, centre, box_rotation), box, fraction in zip(annotations, corners, fractions):
        name = CATEGORY_TO_DETECTION.get(ann["category_name"])
        if name is None or centre[2] < 0.5:
            continue
        box2d = clipped_box_xyxy(box, intrinsics, width, height)
        x0, y0, x1, y1 = box2d
        if (x1 - x0) * (y1 - y0) < 4.0:
            continue
        heading = box_rotation[:, 0]
        velocity = nusc.box_velocity(ann_token)
        velocity = np.zeros(3) if np.any(np.isnan(velocity)) else rotation @ velocity
        centre_uv, _ = project_points(centre[None], intrinsics)
        attribute = nusc.get("attribute", ann["attribute_tokens"][0])["name"] if ann["attribute_tokens"] else ""
        fields["center_cam"].append(centre.tolist())
        fields["size_wlh"].append(list(ann["size"]))
        fields["yaw_cam"].append(math.atan2(heading[0], heading[2]))
        fields["velocity_cam"].append([float(velocity[0]), float(velocity[2])])
        fields["box2d_xyxy"].append([float(v) for v in box2d])
        fields["center_uv"].append(centre_uv[0].tolist())
        fields["label"].append(DETECTION_CLASSES.index(name))
        fields["attribute"].append(attribute)
        fields["num_lidar_pts"].append(int(ann["num_lidar_pts"]) + int(ann["num_radar_pts"]))
        fields["visibility"].append(ann["visibility_token"])
        fields["visible_fraction"].append(round(float(fraction), 4))
        fields["annotation_token"].append(ann_token)
    return fields
