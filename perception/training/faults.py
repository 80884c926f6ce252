"""Bounded tolerance for bad training steps and bad training images.

A non-finite loss on any rank makes every rank skip that step (the decision is all-reduced, so
no rank waits in a gradient all-reduce the others never enter); after ``max_nonfinite_steps``
skips the run stops with the per-task losses. Unreadable training images are replaced by the
dataset (see NuScenesCameraDataset) and counted here; past ``max_bad_images`` the run stops.
Unreadable validation images (validation inside a training run) are skipped and counted the same
way, separately (``val/skipped_images``); evaluation with tools/test.py stays strict.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

LOGGER = logging.getLogger("perception.training")
MAX_LOGGED_PATHS = 20


class FaultTracker:
    def __init__(self, max_nonfinite_steps: int, max_bad_images: int):
        self.max_nonfinite_steps, self.max_bad_images = max_nonfinite_steps, max_bad_images
        self.nonfinite_steps = 0
        self.bad_image_counts = {"training": 0, "validation": 0}  # this rank's, over the run

    def should_skip(self, total: torch.Tensor, losses: dict[str, torch.Tensor], step: int) -> bool:
        """True when this step must be skipped on every rank; raises once the budget is spent."""
        bad = torch.tensor(0.0 if torch.isfinite(total.detach()) else 1.0, device=total.device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() == 0.0:
            return False
        self.nonfinite_steps += 1
        details = ", ".join(f"{k}={v.item():.4g}" for k, v in losses.items())
        if self.nonfinite_steps > self.max_nonfinite_steps:
            raise FloatingPointError(
                f"non-finite training loss at step {step} ({details} on this rank); {self.nonfinite_steps} such steps "
                f"exceed faults.max_nonfinite_steps={self.max_nonfinite_steps}. Lower optimizer.lr, set "
                "trainer.gradient_clip_val, or look for bad labels in the data.")
        LOGGER.warning("skipping step %d: non-finite loss on some rank (this rank: %s); %d of %d allowed", step,
                       details, self.nonfinite_steps, self.max_nonfinite_steps)
        return True

    def count_bad_images(self, paths: list[str], stage: str = "training") -> None:
        """Count (and log the first paths of) unreadable images of ``stage`` ("training" or "validation");
        past ``max_bad_images`` of one stage the run stops."""
        count = self.bad_image_counts[stage]
        for path in paths:
            count += 1
            if count <= MAX_LOGGED_PATHS:
                LOGGER.warning("skipped unreadable %s image %s (%d so far)", stage, path, count)
        self.bad_image_counts[stage] = count
        if count > self.max_bad_images:
            raise RuntimeError(f"{count} unreadable {stage} images exceed faults.max_bad_images="
                               f"{self.max_bad_images} (the first are in the log); check the dataset copy")


def loss_or_skip(module, total: torch.Tensor, losses: dict[str, torch.Tensor], batch_size: int) -> torch.Tensor | None:
    """The end of a training step: log the losses and return the total, or (non-finite on some
    rank) log the skip and return None on every rank, so none runs backward or the optimizer."""
    if module.faults.should_skip(total, losses, module.global_step):
        module.log("train/skipped_steps", float(module.faults.nonfinite_steps), batch_size=batch_size)
        return None
    module.log("train/loss", total, prog_bar=True, batch_size=batch_size)
    for name, value in losses.items():
        module.log(f"train/loss_{name}", value, batch_size=batch_size)
    return total
