"""Sampling that makes a resumed run take exactly the batches the uninterrupted run would have.

- The order of an epoch is a pure function of (seed, epoch), not of a global RNG that a
  restarted process cannot reproduce; it is sharded across ranks like ``DistributedSampler``
  (padded to equal length), so the same sampler serves one process and DDP.
- Items are requested as ``(epoch, index)``, so a dataset can derive its augmentation
  randomness from (seed, epoch, index): the same on any worker, rank or restart.
- ``ResumableDataLoader`` implements ``state_dict`` / ``load_state_dict``, which Lightning saves
  in checkpoints and restores on resume: the epoch and how many of its batches were consumed
  (read from the trainer's progress counters, since loader workers prefetch ahead). The
  resumed epoch skips those batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler


def item_rng(seed: int, key) -> np.random.Generator | None:
    """The augmentation RNG of one item: ``key`` is ``(epoch, index)`` (training) or an int (no randomness)."""
    if isinstance(key, (tuple, list)):
        epoch, index = key
        return np.random.default_rng([seed, int(epoch), int(index)])
    return None


def item_index(key) -> int:
    return int(key[1]) if isinstance(key, (tuple, list)) else int(key)


class ResumableSampler(Sampler):
    def __init__(self, length: int, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.length, self.shuffle, self.seed = length, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self._skip: tuple[int, int] | None = None  # (epoch, samples of this rank to skip)

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        self.epoch = epoch

    def resume(self, epoch: int, samples: int) -> None:
        self.epoch = epoch
        self._skip = (epoch, samples)

    def __len__(self) -> int:
        return math.ceil(self.length / self.world_size)

    def __iter__(self):
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.length)
        else:
            order = np.arange(self.length)
        padded = len(self) * self.world_size
        if padded > self.length:  # repeat the start so every rank gets the same count
            order = np.concatenate([order, order[: padded - self.length]])
        shard = order[self.rank::self.world_size]
        if self._skip is not None and self._skip[0] == self.epoch:
            shard = shard[self._skip[1]:]
        self._skip = None
        return iter([(self.epoch, int(i)) for i in shard])


class ResumableDataLoader(DataLoader):
    """A DataLoader over a ``ResumableSampler`` whose position survives a checkpoint.

    ``consumed_batches`` returns how many batches of the current epoch the training loop has
    processed (wired to the Lightning trainer by the data module).
    """

    def __init__(self, dataset, sampler: ResumableSampler, consumed_batches: Callable[[], int], **kwargs):
        # A private generator for worker seeds: creating an iterator must not advance the global
        # torch RNG, or model randomness (dropout, drop path) would differ after a resume.
        kwargs.setdefault("generator", torch.Generator().manual_seed(sampler.seed))
        super().__init__(dataset, sampler=sampler, **kwargs)
        self.consumed_batches = consumed_batches

    def state_dict(self) -> dict:
        return {"epoch": self.sampler.epoch, "batches": int(self.consumed_batches())}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.resume(int(state["epoch"]), int(state["batches"]) * int(self.batch_size))


def _rank_and_world(datamodule) -> tuple[int, int]:
    trainer = getattr(datamodule, "trainer", None)
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


def _consumed_batches(datamodule) -> int:
    """Training batches of the current epoch processed so far (Lightning's own progress counter)."""
    trainer = getattr(datamodule, "trainer", None)
    return trainer.fit_loop.epoch_loop.batch_progress.current.processed if trainer is not None else 0


def resumable_train_loader(datamodule, dataset, batch_size: int, seed: int, num_workers: int, **kwargs):
    """Shuffled, sharded over the trainer's ranks, and resumable mid-epoch (perception.data.sampling)."""
    rank, world = _rank_and_world(datamodule)
    sampler = ResumableSampler(len(dataset), shuffle=True, seed=seed, rank=rank, world_size=world)
    return ResumableDataLoader(dataset, sampler, lambda: _consumed_batches(datamodule), batch_size=batch_size,
                               drop_last=True, num_workers=num_workers, persistent_workers=num_workers > 0,
                               **kwargs)


def sharded_val_loader(datamodule, dataset, batch_size: int, num_workers: int, **kwargs) -> DataLoader:
    rank, world = _rank_and_world(datamodule)
    sampler = ResumableSampler(len(dataset), shuffle=False, rank=rank, world_size=world)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                      persistent_workers=num_workers > 0, **kwargs)
