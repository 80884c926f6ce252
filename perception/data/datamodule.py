"""LightningDataModule over nuScenes-format data (real or synthetic) through the label cache, optionally
mixed with BDD100K-format data (training draws a fixed fraction of items from each)."""

from __future__ import annotations

import functools
import os

import lightning as L
from torch.utils.data import DataLoader

from perception.data.camera_dataset import NuScenesCameraDataset, collate_camera_batch
from perception.data.label_cache import build_label_cache, default_cache_root, load_label_cache
from perception.data.mixing import MixedDataset
from perception.data.sampling import resumable_train_loader, sharded_val_loader
from perception.data.transforms import CameraTransform


def ensure_label_cache(data_root: str, version: str, split: str, cameras, cache_root: str,
                       drivable_max_range: float) -> tuple[list[dict], str]:
    """Load the cache, building it first if it does not exist (under the build lock: of processes that
    start together, one builds and the others wait for it). A stale cache raises."""
    try:
        return load_label_cache(data_root, version, split, cameras, cache_root, drivable_max_range)
    except FileNotFoundError:
        build_label_cache(data_root, version, split, cameras, cache_root, drivable_max_range, only_if_missing=True)
        return load_label_cache(data_root, version, split, cameras, cache_root, drivable_max_range)


class NuScenesDataModule(L.LightningDataModule):
    def __init__(self, data_root: str, version: str, train_split: str, val_split: str, cameras: list[str],
                 input_size: tuple[int, int], batch_size: int, val_batch_size: int, num_workers: int,
                 cache_root: str | None = None, drivable_max_range: float = 60.0, scale_range=(0.9, 1.15),
                 flip_prob: float = 0.5, photometric: bool = True, hue: float = 0.03, keep_principal_row: bool = False,
                 seed: int = 0, bdd100k=None, lane_cameras=("CAM_FRONT", "CAM_BACK"), min_visibility: float = 0.0,
                 tasks: tuple = ()):
        """``bdd100k``: a perception.config.Bdd100kConfig (data root, splits, training fraction) or None.
        ``tasks``: the task specs whose targets items carry and batches collate (perception.tasks)."""
        super().__init__()
        if not os.path.isdir(os.path.join(data_root, version)):
            raise FileNotFoundError(f"no nuScenes tables at {os.path.join(data_root, version)}: set data_root and "
                                    "version (e.g. --cfg-options data_root=/data/nuscenes version=v1.0-trainval)")
        self.data_root = os.path.abspath(data_root)
        self.version = version
        self.splits = {"train": train_split, "val": val_split}
        self.cameras = list(cameras)
        self.input_size = tuple(input_size)
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size
        self.num_workers = num_workers
        self.cache_root = cache_root or default_cache_root(self.data_root)
        self.drivable_max_range = drivable_max_range
        self.augment = dict(scale_range=tuple(scale_range), flip_prob=flip_prob, photometric=photometric, hue=hue,
                            keep_principal_row=keep_principal_row)
        self.seed = seed
        self.bdd100k = bdd100k
        self.lane_cameras = tuple(lane_cameras)
        self.min_visibility = min_visibility
        self.tasks = tuple(tasks)
        self.collate = functools.partial(collate_camera_batch, tasks=self.tasks)
        self.datasets: dict = {}

    def _transform(self, train: bool) -> CameraTransform:
        return CameraTransform(self.input_size, train=train, seed=self.seed if train else None,
                               **(self.augment if train else {}))

    def dataset(self, stage: str, split: str | None = None,
                skip_bad_images: bool | None = None) -> NuScenesCameraDataset:
        """The nuScenes dataset of a stage ("train" augments). Unreadable images are skipped and
        reported (``skip_bad_images``, default: in training) or an error (evaluation)."""
        split = split or self.splits[stage]
        infos, directory = ensure_label_cache(self.data_root, self.version, split, self.cameras, self.cache_root,
                                              self.drivable_max_range)
        train = stage == "train"
        # Training decodes JPEGs at half size up to scale 0.6 (scale jitter around 0.5 then never
        # pays for a full decode; at most a 1.2x upsample); evaluation only when nothing is upsampled.
        skip = train if skip_bad_images is None else skip_bad_images
        return NuScenesCameraDataset(self.data_root, infos, directory, self._transform(train), seed=self.seed,
                                     skip_bad_images=skip, half_decode_max_scale=0.6 if train else 0.5,
                                     lane_cameras=self.lane_cameras, min_visibility=self.min_visibility,
                                     tasks=self.tasks)

    def bdd100k_dataset(self, stage: str, split: str | None = None, skip_bad_images: bool | None = None):
        """The BDD100K-format dataset of a stage, or None when the config mixes in none (``skip_bad_images``
        as in ``dataset``)."""
        from perception.data.bdd100k import Bdd100kDataset

        if self.bdd100k is None:
            return None
        train = stage == "train"
        split = split or (self.bdd100k.train_split if train else self.bdd100k.val_split)
        return Bdd100kDataset(self.bdd100k.data_root, split, self._transform(train), seed=self.seed,
                              skip_bad_images=train if skip_bad_images is None else skip_bad_images,
                              half_decode_max_scale=0.6 if train else 0.5, tasks=self.tasks)

    def mixed_dataset(self, stage: str, skip_bad_images: bool | None = None):
        """Training: nuScenes and BDD100K items in the configured fractions; validation: both, each once."""
        nuscenes = self.dataset(stage, skip_bad_images=skip_bad_images)
        bdd = self.bdd100k_dataset(stage, skip_bad_images=skip_bad_images)
        if bdd is None:
            return nuscenes
        if stage == "train":
            fraction = self.bdd100k.sample_fraction
            return MixedDataset([nuscenes, bdd], [1.0 - fraction, fraction])
        # Fractions equal to the sizes: a plain concatenation that accepts the samplers' (epoch, index) keys.
        return MixedDataset([nuscenes, bdd], [len(nuscenes), len(bdd)])

    def prepare_data(self) -> None:
        for split in set(self.splits.values()):
            ensure_label_cache(self.data_root, self.version, split, self.cameras, self.cache_root,
                               self.drivable_max_range)

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self.datasets["train"] = self.mixed_dataset("train")
        if stage in (None, "fit", "validate"):
            # Validation inside a training run skips and counts unreadable images (val/skipped_images)
            # rather than killing the run; tools/test.py builds its datasets strict.
            self.datasets["val"] = self.mixed_dataset("val", skip_bad_images=True)

    def train_dataloader(self) -> DataLoader:
        return resumable_train_loader(self, self.datasets["train"], self.batch_size, self.seed,
                                      num_workers=self.num_workers, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return sharded_val_loader(self, self.datasets["val"], self.val_batch_size, num_workers=self.num_workers,
                                  collate_fn=self.collate)

