"""Checkpoints written atomically: a crash mid-save leaves the previous file intact."""

from __future__ import annotations

import os
import tempfile

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


def atomic_torch_save(obj, path: str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".ckpt", dir=directory)
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        atomic_torch_save(checkpoint, str(path))
