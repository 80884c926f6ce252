"""Training on several datasets at once, each contributing a fixed fraction of the items."""

from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset


class MixedDataset(Dataset):
    """``len`` virtual items split among ``sources`` by ``fractions`` (largest remainder).

    Virtual index v of source s reads source item (v - start_s + epoch * count_s) mod len_s, so
    over successive epochs a source smaller than its share repeats and one larger than its share
    is walked through in full rather than always truncated to the same items. Keys are
    ``(epoch, index)`` from a ResumableSampler (the epoch-shuffled order comes from the sampler) or
    plain indices (epoch 0); the source sees the same kind of key.
    """

    def __init__(self, sources: list[Dataset], fractions: list[float], length: int | None = None):
        if len(sources) != len(fractions) or not sources:
            raise ValueError("one fraction per source dataset is needed")
        if any(f < 0 for f in fractions) or sum(fractions) <= 0:
            raise ValueError(f"fractions must be >= 0 with a positive sum, got {fractions}")
        for source, fraction in zip(sources, fractions):
            if fraction > 0 and len(source) == 0:
                raise ValueError(f"a source dataset ({type(source).__name__}) is empty but has fraction {fraction}")
        self.sources = sources
        self.length = int(length if length is not None else sum(len(s) for s in sources))
        shares = np.asarray(fractions, np.float64) / sum(fractions) * self.length
        counts = np.floor(shares).astype(np.int64)
        counts[np.argsort(-(shares - counts))[: self.length - counts.sum()]] += 1
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)])

    def __len__(self) -> int:
        return self.length

    def locate(self, key) -> tuple[int, object]:
        """(source index, the key to ask that source for)."""
        epoch, index = (int(key[0]), int(key[1])) if isinstance(key, (tuple, list)) else (0, int(key))
        source = int(np.searchsorted(self.starts, index, side="right") - 1)
        local = (index - int(self.starts[source]) + epoch * int(self.counts[source])) % len(self.sources[source])
        return source, ((epoch, local) if isinstance(key, (tuple, list)) else local)

    def __getitem__(self, key):
        source, local_key = self.locate(key)
        return self.sources[source][local_key]
