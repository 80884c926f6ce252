"""Checkpoints written atomically: a crash mid-save leaves the previous file intact."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from perception.core.errors import PerceptionError


class CheckpointWriteError(PerceptionError, OSError):
    """A checkpoint could not be written (full disk, no permission); the previous one is intact."""


def atomic_torch_save(obj, path: str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    A failed write raises CheckpointWriteError saying where and why: torch reports a full disk as
    "enforce fail at inline_container.cc", which hides the Errno 28 the user needs to see."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".ckpt", dir=directory)
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except (OSError, RuntimeError) as error:
        _remove(tmp_path)
        raise CheckpointWriteError(_write_failure(path, directory, error)) from error
    except BaseException:
        _remove(tmp_path)
        raise


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)


def _write_failure(path: str, directory: str, error: BaseException) -> str:
    free_gb = shutil.disk_usage(directory).free / 1e9
    full = isinstance(error, OSError) and error.errno == errno.ENOSPC
    cause = "No space left on device" if full else f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return (f"could not write checkpoint {path} ({cause}); {free_gb:.1f} GB free on the disk holding {directory}. "
            "A full disk is the usual cause. The previous checkpoint is intact: free space (or give another "
            "--work-dir) and continue with --resume auto.")


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        atomic_torch_save(checkpoint, str(path))
