"""BDD100K-format data: the public layout, read into the same item structure as nuScenes.

Layout (the 2020+ release; ``split`` is e.g. ``train`` or ``val``)::

    <root>/images/100k/<split>/<name>.jpg
    <root>/labels/det_20/det_<split>.json            frames with box2d labels; "traffic light"
                                                     boxes carry attributes.trafficLightColor
    <root>/labels/lane/polygons/lane_<split>.json    frames with poly2d lane markings
    <root>/labels/drivable/masks/<split>/<stem>.png  0 direct, 1 alternative, 2 background

Tasks per image: traffic lights (when the frame is in the detection JSON), lanes (when it is in
the lane JSON) and drivable area (when its mask exists). BDD100K has no 3D boxes, so obstacles are
never labelled here. Lane categories map onto the nuScenes-derived classes: white and "other"
markings are lane dividers, yellow ones road dividers; road curbs, crosswalks and markings
across the road (laneDirection "vertical") are not lanes in this taxonomy and are dropped.
"""

from __future__ import annotations

import json
import os

import cv2
import numpy as np

from perception.core.errors import PerceptionError
from perception.core.lane_coding import LANE_CLASSES
from perception.core.light_states import LIGHT_STATES
from perception.data.camera_dataset import CameraDataset, ImageReadError
from perception.data.drivable_projection import IGNORE_INDEX
from perception.data.image_io import read_image_file
from perception.data.tables import check_inside_root
from perception.data.transforms import CameraTransform

LIGHT_COLOURS = {"red": "red", "r": "red", "yellow": "yellow", "y": "yellow", "green": "green", "g": "green",
                 "none": "off", "na": "off", "off": "off"}
LANE_CATEGORIES = {"single white": "lane_divider", "double white": "lane_divider", "single other": "lane_divider",
                   "double other": "lane_divider", "single yellow": "road_divider", "double yellow": "road_divider"}
DROPPED_LANE_CATEGORIES = ("road curb", "crosswalk")
BEZIER_STEPS = 8  # points per cubic segment ("C" vertices in poly2d)


class Bdd100kFormatError(PerceptionError, ValueError):
    pass


def split_paths(root: str, split: str) -> dict[str, str]:
    return {
        "images": os.path.join(root, "images", "100k", split),
        "detection": os.path.join(root, "labels", "det_20", f"det_{split}.json"),
        "lanes": os.path.join(root, "labels", "lane", "polygons", f"lane_{split}.json"),
        "drivable": os.path.join(root, "labels", "drivable", "masks", split),
    }


def poly2d_to_polyline(vertices, types: str | None) -> np.ndarray:
    """Scalabel poly2d -> [N,2]: "L" vertices are corners, "CC" pairs are cubic Bezier controls."""
    vertices = np.asarray(vertices, np.float64).reshape(-1, 2)
    types = types or "L" * len(vertices)
    out, i = [vertices[0]], 1
    while i < len(vertices):
        if types[i] == "C" and i + 1 < len(vertices) and types[i + 1] == "C":
            p0, c1, c2 = out[-1], vertices[i], vertices[i + 1]
            p3 = vertices[i + 2] if i + 2 < len(vertices) else vertices[0]
            for t in np.linspace(0, 1, BEZIER_STEPS + 1)[1:]:
                out.append((1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * c1 + 3 * (1 - t) * t ** 2 * c2 + t ** 3 * p3)
            i += 3
        else:
            out.append(vertices[i])
            i += 1
    return np.asarray(out)


def _load_frames(path: str) -> list[dict] | None:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        frames = json.load(f)
    if isinstance(frames, dict) and "frames" in frames:  # Scalabel dataset object
        frames = frames["frames"]
    if not isinstance(frames, list):
        raise Bdd100kFormatError(f"{path} must hold a list of frames (Scalabel format), got {type(frames).__name__}")
    return frames


def _lights_of(frame: dict, path: str) -> dict:
    boxes, labels = [], []
    for label in frame.get("labels") or []:
        if label.get("category") != "traffic light" or not label.get("box2d"):
            continue
        colour = str((label.get("attributes") or {}).get("trafficLightColor", "none")).lower()
        if colour not in LIGHT_COLOURS:
            raise Bdd100kFormatError(f"{path}: frame {frame.get('name')} has trafficLightColor {colour!r}; "
                                     f"expected one of {sorted(LIGHT_COLOURS)}")
        b = label["box2d"]
        boxes.append([float(b["x1"]), float(b["y1"]), float(b["x2"]), float(b["y2"])])
        labels.append(LIGHT_STATES.index(LIGHT_COLOURS[colour]))
    return {"boxes_xyxy": boxes, "labels": labels}


def _lanes_of(frame: dict, path: str) -> dict:
    polylines, labels = [], []
    for label in frame.get("labels") or []:
        category = label.get("category", "")
        if category in DROPPED_LANE_CATEGORIES:
            continue
        if category not in LANE_CATEGORIES:
            raise Bdd100kFormatError(f"{path}: frame {frame.get('name')} has lane category {category!r}; expected "
                                     f"one of {sorted(LANE_CATEGORIES) + list(DROPPED_LANE_CATEGORIES)}")
        if (label.get("attributes") or {}).get("laneDirection", "parallel") == "vertical":
            continue
        for poly in label.get("poly2d") or []:
            points = poly2d_to_polyline(poly["vertices"], poly.get("types"))
            if len(points) >= 2:
                polylines.append(np.round(points, 1).tolist())
                labels.append(LANE_CLASSES.index(LANE_CATEGORIES[category]))
    return {"polylines": polylines, "labels": labels}


def load_bdd100k_infos(root: str, split: str) -> list[dict]:
    """One info per image of the split: image path, size, and the labels each task has (or None)."""
    paths = split_paths(root, split)
    detection, lanes = _load_frames(paths["detection"]), _load_frames(paths["lanes"])
    if detection is None and lanes is None:
        raise FileNotFoundError(f"BDD100K split {split!r} under {root} has neither {paths['detection']} nor "
                                f"{paths['lanes']}; check bdd100k.data_root and the split names")
    infos: dict[str, dict] = {}
    for frames, key, parse, path in ((detection, "lights", _lights_of, paths["detection"]),
                                     (lanes, "lanes", _lanes_of, paths["lanes"])):
        for frame in frames or []:
            name = check_inside_root(frame["name"], f"{path}: frame name")
            info = infos.setdefault(name, {"name": name, "image_path": os.path.join("images", "100k", split, name),
                                           "lights": None, "lanes": None})
            info[key] = parse(frame, path)
    for info in infos.values():
        mask = os.path.join(paths["drivable"], os.path.splitext(info["name"])[0] + ".png")
        info["drivable_mask"] = mask if os.path.isfile(mask) else None
    return [infos[name] for name in sorted(infos)]


def read_drivable_mask(path: str | None) -> np.ndarray | None:
    """Binary drivable mask at the original resolution (1 drivable, 0 not, IGNORE_INDEX unknown), None
    when the image has no mask: 0 direct / 1 alternative -> drivable, 2 background -> not."""
    if path is None:
        return None
    raw = read_image_file(path, cv2.IMREAD_UNCHANGED, "drivable mask")
    raw = raw if raw.ndim == 2 else raw[..., 0]
    return np.where(raw <= 1, 1, np.where(raw == 2, 0, IGNORE_INDEX)).astype(np.uint8)


class Bdd100kDataset(CameraDataset):
    """BDD100K-format images with the same targets structure as NuScenesCameraDataset."""

    name = "bdd100k"
    IMAGE_SIZE = (1280, 720)  # every BDD100K image; read from the file when it differs

    def __init__(self, root: str, split: str, transform: CameraTransform, seed: int = 0,
                 skip_bad_images: bool = False, half_decode_max_scale: float = 0.5, tasks: tuple = ()):
        infos = load_bdd100k_infos(root, split)
        self._sizes: dict[str, list[int]] = {}
        for info in infos:
            info.setdefault("image_size", self._image_size(os.path.join(root, info["image_path"])))
        super().__init__(root, infos, transform, seed, skip_bad_images, half_decode_max_scale=half_decode_max_scale,
                         tasks=tasks)
        self.split = split

    def _image_size(self, path: str) -> list[int]:
        """[W, H] of the first readable image of each directory (BDD100K images share one size; an
        image of another size is reported when it is read)."""
        directory = os.path.dirname(path)
        if directory not in self._sizes:
            image = cv2.imread(path)
            if image is None:
                return list(self.IMAGE_SIZE)
            self._sizes[directory] = [image.shape[1], image.shape[0]]
        return self._sizes[directory]

    def image_key(self, info: dict) -> str:
        return f"bdd100k/{self.split}/{info['name']}"

    def read_drivable_truth(self, meta: dict) -> np.ndarray | None:
        return read_drivable_mask(meta["drivable_mask_path"])

    def principal_row(self, info: dict) -> float:
        return info["image_size"][1] / 2  # unknown calibration: the image centre, as read_labels assumes

    def read_labels(self, info: dict, height: int, width: int) -> dict:
        mask = read_drivable_mask(info["drivable_mask"])
        if mask is not None and mask.shape != (height, width):
            raise ImageReadError(f"drivable mask {info['drivable_mask']} is {mask.shape[1]}x{mask.shape[0]}, "
                                 f"its image {width}x{height}")
        lights = info["lights"] or {"boxes_xyxy": [], "labels": []}
        return {"mask": mask, "boxes_xyxy": np.asarray(lights["boxes_xyxy"], np.float32).reshape(-1, 4),
                "keypoints_uv": np.zeros((0, 2), np.float32),
                # Unknown calibration; only the 2D transform uses it (no 3D targets here).
                "intrinsics": np.array([[width, 0.0, width / 2], [0.0, width, height / 2], [0.0, 0.0, 1.0]]),
                "lanes": [np.asarray(p, np.float32) for p in (info["lanes"] or {"polylines": []})["polylines"]]}

    def make_meta(self, info: dict, out: dict, image_path: str) -> dict:
        return {"dataset": self.name, "image_key": self.image_key(info), "sample_token": None,
                "image_path": image_path, "orig_size": tuple(info["image_size"]), "intrinsics": out["intrinsics"],
                "affine": out["affine"], "flipped": out["params"].flip, "drivable_mask_path": info["drivable_mask"],
                "lanes_gt": info["lanes"], "lights_gt": info["lights"]}  # original px; None: not labelled
