"""Camera-image datasets: image, targets per task (each with a "has labels" flag) and meta.

nuScenes items come from the label cache; BDD100K items from perception.data.bdd100k.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from perception.data.image_io import ImageReadError, read_camera_image  # noqa: F401  (ImageReadError: re-exported)
from perception.data.mask_codec import read_mask
from perception.data.sampling import item_index, item_rng
from perception.data.transforms import IMAGENET_MEAN_RGB, IMAGENET_STD_RGB, CameraTransform, GeometryParams


def read_image_rgb(path: str) -> np.ndarray:
    """uint8 [H,W,3] RGB; raises ImageReadError naming the file when it is missing or corrupt."""
    return cv2.cvtColor(read_camera_image(path), cv2.COLOR_BGR2RGB)


_MEAN_255 = torch.tensor(IMAGENET_MEAN_RGB).view(3, 1, 1) * 255.0
_INV_STD_255 = 1.0 / (torch.tensor(IMAGENET_STD_RGB).view(3, 1, 1) * 255.0)


def to_model_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 RGB images [..., 3, H, W] -> float32 [..., 3, H, W], ImageNet mean/std, on the images' device.

    Items and batches carry uint8 images: a quarter of the bytes through the loader's queue, and the
    normalisation runs once per batch where the model runs (on a GPU: free) instead of per item in
    the loader worker (bench/data_loading.py)."""
    if images.dtype != torch.uint8:
        raise TypeError(f"expected uint8 images (dataset items and batches), got {images.dtype}")
    mean, inv_std = _MEAN_255.to(images.device), _INV_STD_255.to(images.device)
    # Batches arrive in channels-last memory (see collate_camera_batch); arithmetic on that layout is
    # several times slower on the CPU, so make the bytes contiguous first.
    return images.contiguous().float().sub_(mean).mul_(inv_std)


def normalize_image(image_rgb: np.ndarray) -> torch.Tensor:
    """uint8 [H,W,3] RGB -> float32 [3,H,W], ImageNet mean/std."""
    return to_model_input(torch.from_numpy(np.ascontiguousarray(image_rgb)).permute(2, 0, 1))


class CameraDataset(Dataset):
    """Items: dict(image uint8 [3,H,W] RGB (``to_model_input`` normalises), targets (per task, each with a
    ``valid`` "has labels" flag), meta).

    Subclasses say where an item's image and labels are (``read_labels``: which labels take the
    transform's mask, box, keypoint and polyline slots) and what evaluation needs of it
    (``make_meta``); each task spec of ``tasks`` turns the transformed labels into its targets
    (``make_item``). Reading, half-size decoding, augmentation and skipping unreadable training
    images are shared.
    """

    # Consecutive unreadable images tolerated while looking for a replacement item.
    MAX_REPLACEMENT_TRIES = 16
    name = "camera"

    def __init__(self, data_root: str, infos: list[dict], transform: CameraTransform, seed: int = 0,
                 skip_bad_images: bool = False, reduced_decoding: bool = True, half_decode_max_scale: float = 0.5,
                 tasks: tuple = ()):
        """``skip_bad_images`` (training): an unreadable image is replaced by the next item and its path
        reported in ``meta["skipped_images"]`` (counted against faults.max_bad_images); otherwise
        (evaluation) it raises ImageReadError naming the file. ``tasks``: the task specs whose targets
        items carry (perception.tasks.CAMERA_TASKS; each reads its labels with ``item_targets``)."""
        self.tasks = tuple(tasks)
        self.seed, self.skip_bad_images, self.reduced_decoding = seed, skip_bad_images, reduced_decoding
        # Decode at half size when the sampled scale is at most this: 0.5 never upsamples the
        # half-size image (evaluation); training may allow a little more (e.g. 0.6: at most 1.2x).
        self.half_decode_max_scale = half_decode_max_scale
        self.data_root = data_root
        self.infos = infos
        self.transform = transform

    def __len__(self) -> int:
        return len(self.infos)

    def __getitem__(self, key) -> dict:
        """``key``: an index, or (epoch, index) from a ResumableSampler (augmentation keyed by it)."""
        if not self.skip_bad_images:
            return self._item(key)
        skipped = []
        for attempt in range(self.MAX_REPLACEMENT_TRIES):
            index = (item_index(key) + attempt) % len(self)
            try:
                item = self._item((key[0], index) if isinstance(key, (tuple, list)) else index)
            except ImageReadError:
                skipped.append(os.path.join(self.data_root, self.infos[index]["image_path"]))
                continue
            item["meta"]["skipped_images"] = skipped
            return item
        raise ImageReadError(f"{len(skipped)} consecutive training images are unreadable, e.g. {skipped[:3]}; "
                             "the dataset copy looks broken")

    def image_key(self, info: dict) -> str:
        """A key unique to one image across datasets (results are gathered by it)."""
        raise NotImplementedError

    def principal_row(self, info: dict) -> float:
        """The image's cy in original pixels (the row the horizon crosses for a level camera)."""
        raise NotImplementedError

    def read_labels(self, info: dict, height: int, width: int) -> dict:
        """Labels in original pixels: mask [H,W] uint8 or None, boxes_xyxy [N,4], keypoints_uv [N,2],
        intrinsics [3,3], lanes (list of [K,2] polylines)."""
        raise NotImplementedError

    def make_meta(self, info: dict, out: dict, image_path: str) -> dict:
        """What evaluation and drawing need of an item besides its targets (original-image truth, geometry)."""
        raise NotImplementedError

    def make_item(self, info: dict, out: dict, image_path: str) -> dict:
        """Every task's targets (its ``empty_targets`` where this item has no labels for it) and the meta."""
        targets = {}
        for task in self.tasks:
            found = task.item_targets(self, info, out)
            targets[task.name] = task.empty_targets() if found is None else found
        image = torch.from_numpy(out["image"]).permute(2, 0, 1)  # uint8 [3,H,W], a view of the HWC pixels
        return {"image": image, "targets": targets,
                "meta": self.make_meta(info, out, image_path)}

    def _item(self, key) -> dict:
        rng = item_rng(self.seed, key)
        if rng is not None:
            self.transform.reseed(rng)
        info = self.infos[item_index(key)]
        image_path = os.path.join(self.data_root, info["image_path"])
        width, height = info["image_size"]
        params = self.transform.sample_params(width, height, principal_row=self.principal_row(info))
        half = self.reduced_decoding and params.scale <= self.half_decode_max_scale
        # BGR: the transform's colour step swaps to RGB.
        image = read_camera_image(image_path, half=half)
        expected = ((height + 1) // 2, (width + 1) // 2) if half else (height, width)
        if image.shape[:2] != expected:
            raise ImageReadError(f"camera image {image_path} is {image.shape[1]}x{image.shape[0]} but its "
                                 f"label record says {width}x{height}")
        labels = self.read_labels(info, height, width)
        mask, boxes, keypoints = labels["mask"], labels["boxes_xyxy"], labels["keypoints_uv"]
        intrinsics = labels["intrinsics"]
        if half:  # express everything in half-resolution pixels; the transform then scales by 2x as much
            if mask is not None:
                mask = cv2.resize(mask, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_NEAREST)
            boxes, keypoints = boxes * 0.5, keypoints * 0.5
            intrinsics = np.diag([0.5, 0.5, 1.0]) @ intrinsics
            params = GeometryParams(params.scale * 2.0, params.crop_x, params.crop_y, params.flip)
        out = self.transform(image, mask, boxes, keypoints, intrinsics, params=params, bgr=True)
        if half:  # meta keeps the map from *original* pixels to the input
            out["affine"] = out["affine"] @ np.diag([0.5, 0.5, 1.0])
        # Lane polylines follow the same affine (a flip mirrors them); the criterion clips to the image.
        out["lanes"] = [torch.from_numpy(apply_affine(lane, out["affine"]).astype(np.float32))
                        for lane in labels["lanes"]]
        return self.make_item(info, out, image_path)


def apply_affine(points: np.ndarray, affine: np.ndarray) -> np.ndarray:
    """points [N,2] -> [N,2] through the [3,3] affine."""
    points = np.asarray(points, np.float64).reshape(-1, 2)
    return points @ affine[:2, :2].T + affine[:2, 2]


def drop_hidden_obstacles(info: dict, min_visibility: float) -> dict:
    """A copy of a label-cache info without the obstacles this camera sees less than ``min_visibility`` of."""
    obstacles = info["obstacles"]
    keep = [i for i, f in enumerate(obstacles["visible_fraction"]) if f >= min_visibility]
    return {**info, "obstacles": {k: [v[i] for i in keep] for k, v in obstacles.items()}}


class NuScenesCameraDataset(CameraDataset):
    """One item per (sample, camera) of a label cache: drivable area, 3D obstacles and map-derived
    lanes are labelled; traffic lights are not (nuScenes has no light states).

    Lanes are labelled on ``lane_cameras`` only. Row-anchored lanes describe markings that run
    away from the camera (as in CULane and BDD100K); in the side cameras the markings run across
    the image and would be squeezed into a row or two, so there they are "not labelled", never
    "no lanes".
    """

    name = "nuscenes"

    def __init__(self, data_root: str, infos: list[dict], cache_directory: str, transform: CameraTransform,
                 seed: int = 0, skip_bad_images: bool = False, reduced_decoding: bool = True,
                 half_decode_max_scale: float = 0.5, lane_cameras: tuple[str, ...] = ("CAM_FRONT", "CAM_BACK"),
                 min_visibility: float = 0.0, tasks: tuple = ()):
        """``min_visibility``: obstacles of which this camera sees a smaller fraction (the label cache's
        ``visible_fraction``) are dropped from the targets: a box over pixels that show something else
        teaches the classifier noise."""
        infos = [drop_hidden_obstacles(info, min_visibility) for info in infos] if min_visibility > 0 else infos
        super().__init__(data_root, infos, transform, seed, skip_bad_images, reduced_decoding, half_decode_max_scale,
                         tasks)
        self.cache_directory = cache_directory
        self.lane_cameras = tuple(lane_cameras)

    def principal_row(self, info: dict) -> float:
        return float(info["intrinsics"][1][2])

    def read_labels(self, info: dict, height: int, width: int) -> dict:
        obstacles = info["obstacles"]
        return {
            "mask": read_mask(os.path.join(self.cache_directory, info["drivable_mask"]), height, width),
            "boxes_xyxy": np.asarray(obstacles["box2d_xyxy"], np.float32).reshape(-1, 4),
            "keypoints_uv": np.asarray(obstacles["center_uv"], np.float32).reshape(-1, 2),
            "intrinsics": np.asarray(info["intrinsics"], dtype=np.float64),
            "lanes": [np.asarray(p, np.float32) for p in info["lanes"]["polylines"]],
        }

    def image_key(self, info: dict) -> str:
        return info["sample_data_token"]

    def read_drivable_truth(self, meta: dict) -> np.ndarray:
        """The drivable mask at the original resolution (1, 0, IGNORE), for evaluation."""
        width, height = meta["orig_size"]
        return read_mask(meta["drivable_mask_path"], height, width)

    def make_meta(self, info: dict, out: dict, image_path: str) -> dict:
        width, height = info["image_size"]
        return {
            "dataset": self.name, "sample_token": info["sample_token"], "sample_data_token": info["sample_data_token"],
            "image_key": self.image_key(info), "camera": info["camera"], "image_path": image_path,
            "orig_size": (width, height), "intrinsics": out["intrinsics"],
            "ego_from_camera": np.asarray(info["ego_from_camera"]),
            "global_from_ego": np.asarray(info["global_from_ego"]),
            "affine": out["affine"], "flipped": out["params"].flip,
            "drivable_mask_path": os.path.join(self.cache_directory, info["drivable_mask"]),
            # original px, for evaluation; None: not labelled
            "lanes_gt": info["lanes"] if info["camera"] in self.lane_cameras else None, "lights_gt": None,
        }


def collate_camera_batch(items: list[dict], tasks: tuple) -> dict:
    """Stack images (uint8 [B,3,H,W]); each task of ``tasks`` collates its targets (``Task.collate``: dense ones
    stacked, sparse ones a list per image) and carries ``valid`` [B] (bool): which images have its labels."""
    input_size = tuple(items[0]["image"].shape[-2:])  # (H, W)
    # Items' images are [3,H,W] views of HWC pixels: stacking them as HWC is a plain copy (a CHW stack
    # transposes every byte), and the batch is [B,3,H,W] in channels-last memory; to_model_input makes
    # it contiguous where the model runs.
    images = torch.stack([item["image"].permute(1, 2, 0) for item in items]).permute(0, 3, 1, 2)
    return {
        "images": images,
        "targets": {task.name: task.collate([item["targets"][task.name] for item in items], input_size)
                    for task in tasks},
        "meta": [item["meta"] for item in items],
        "skipped_images": [path for item in items for path in item["meta"].get("skipped_images", [])],
    }
