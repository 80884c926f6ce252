"""Dataset and LightningDataModule over the cached forecasting samples of two splits."""

from __future__ import annotations

import os

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from perception.data.label_cache import default_cache_root
from perception.data.motion_cache import ensure_motion_cache
from perception.data.motion_samples import MotionDataSettings
from perception.data.sampling import item_index, item_rng, resumable_train_loader, sharded_val_loader

MODEL_INPUTS = ("history", "history_valid", "lanes", "lanes_valid")
TARGETS = ("future", "future_valid")


class MotionDataset(Dataset):
    """Float32 tensors per agent (model inputs + targets, agent frame); ``mirror_prob`` > 0 mirrors
    x -> -x (history, future, lanes and lane directions) as augmentation."""

    def __init__(self, arrays: dict, mirror_prob: float = 0.0, seed: int = 0):
        self.arrays = {k: np.ascontiguousarray(arrays[k], dtype=np.float32) for k in MODEL_INPUTS + TARGETS}
        self.tokens = list(arrays["tokens"])
        self.mirror_prob, self.seed = mirror_prob, seed

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, key) -> dict[str, torch.Tensor]:
        """``key``: an index, or (epoch, index) from a ResumableSampler (augmentation keyed by it)."""
        index, rng = item_index(key), item_rng(self.seed, key)
        item = {k: torch.from_numpy(v[index].copy()) for k, v in self.arrays.items()}
        if self.mirror_prob and rng is not None and rng.random() < self.mirror_prob:
            for name in ("history", "future"):
                item[name][..., 0] = -item[name][..., 0]
            item["lanes"][..., 0] = -item["lanes"][..., 0]  # x
            item["lanes"][..., 2] = -item["lanes"][..., 2]  # x component of the lane direction
        return item


class MotionDataModule(L.LightningDataModule):
    def __init__(self, data_root: str, version: str, train_split: str, val_split: str, settings: MotionDataSettings,
                 use_map: bool, batch_size: int, val_batch_size: int, num_workers: int = 0,
                 cache_root: str | None = None, mirror_prob: float = 0.0, seed: int = 0):
        super().__init__()
        self.data_root, self.version = data_root, version
        self.train_split, self.val_split = train_split, val_split
        self.settings, self.use_map = settings, use_map
        self.batch_size, self.val_batch_size, self.num_workers = batch_size, val_batch_size, num_workers
        self.cache_root = cache_root or default_cache_root(data_root)
        self.mirror_prob, self.seed = mirror_prob, seed

    def arrays(self, split: str) -> dict:
        if not os.path.isdir(os.path.join(self.data_root, self.version)):
            raise FileNotFoundError(f"no nuScenes tables at {os.path.join(self.data_root, self.version)}; "
                                    "check data_root and version")
        return ensure_motion_cache(self.data_root, self.version, split, self.settings, self.use_map, self.cache_root)

    def prepare_data(self) -> None:
        for split in (self.train_split, self.val_split):
            self.arrays(split)

    def setup(self, stage: str | None = None) -> None:
        self.train_set = MotionDataset(self.arrays(self.train_split), self.mirror_prob, self.seed)
        self.val_set = MotionDataset(self.arrays(self.val_split))

    def train_dataloader(self) -> DataLoader:
        return resumable_train_loader(self, self.train_set, self.batch_size, self.seed, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return sharded_val_loader(self, self.val_set, self.val_batch_size, num_workers=self.num_workers)
