"""Save the torch RNG state with each checkpoint and put it back before the first resumed step.

With the data order and augmentation keyed by (seed, epoch, index) (perception.data.sampling),
the torch RNG is the last thing that makes a resumed run differ from an uninterrupted one
(dropout, drop path). It is restored at the first training batch, not at load time, because
Lightning does work between loading and that batch (e.g. creating the loader iterator).
"""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback


class RngStateCallback(Callback):
    def __init__(self):
        self._pending: dict | None = None

    def state_dict(self) -> dict:
        state = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self._pending = state_dict

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self._pending is None:
            return
        torch.set_rng_state(self._pending["torch"])
        if "cuda" in self._pending and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(self._pending["cuda"])
        self._pending = None
