"""SIGTERM (preemption, a scheduler's time limit, `kill`) saves a resumable checkpoint and exits 143.

Lightning turns SIGTERM into ``SIGTERMException`` at the end of the running batch: a clean
batch boundary, the same point a step-based checkpoint is written at. Left alone, that
exception is a ``SystemExit`` with no code, so the job exited 0 ("succeeded" to SLURM or
Kubernetes) and the work since the last save was gone. Here the callback saves
``checkpoints/last.ckpt`` (atomically, through the run's checkpoint IO) and the runner exits with
128 + SIGTERM = 143, the code schedulers expect; ``--resume auto`` then continues exactly.
"""

from __future__ import annotations

import os

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

SIGTERM_EXIT_CODE = 143


class TrainingPreempted(SystemExit):
    """Raised by the runner after SIGTERM; ``code`` is 143 and ``checkpoint`` the path saved."""

    def __init__(self, checkpoint: str | None):
        super().__init__(SIGTERM_EXIT_CODE)
        self.checkpoint = checkpoint

    def __str__(self) -> str:
        saved = f"saved {self.checkpoint}" if self.checkpoint else "nothing saved (no training step had finished)"
        return f"SIGTERM: training stopped at a batch boundary, {saved}; continue with --resume auto"


class SaveOnSigterm(Callback):
    def __init__(self, path: str):
        self.path = path
        self.saved: str | None = None

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.global_step > 0:
            trainer.save_checkpoint(self.path)  # every rank calls it; the strategy writes on rank 0
            self.saved = self.path


def remove_stale_temporaries(directory: str) -> list[str]:
    """Delete ``.tmp-*.ckpt`` left by saves that were killed mid-write (atomic_torch_save's temporaries)."""
    if not os.path.isdir(directory):
        return []
    stale = [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(".tmp-") and n.endswith(".ckpt")]
    for path in stale:
        os.remove(path)
    return stale
