"""What every LightningModule of the package shares: the optimizer and schedule, fault handling,
the config stored in checkpoints and the training step. Subclasses say how a batch becomes losses."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.training.faults import FaultTracker, loss_or_skip
from perception.training.optim import build_optimizer


class BaseSystem(L.LightningModule):
    """``model`` is trained with ``losses(batch)`` (weighted total, per-term values); ``monitor`` names
    the validation metric that picks best.ckpt and ``monitor_mode`` whether higher ("max") is better."""

    monitor, monitor_mode = "val/loss", "min"

    def __init__(self, model: nn.Module, optimizer: OptimizerConfig, scheduler: SchedulerConfig,
                 config_text: str = "", faults: FaultsConfig | None = None):
        super().__init__()
        self.model = model
        self.optimizer_cfg, self.scheduler_cfg, self.config_text = optimizer, scheduler, config_text
        faults = faults or FaultsConfig()
        self.faults = FaultTracker(faults.max_nonfinite_steps, faults.max_bad_images)

    def losses(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def batch_size(self, batch: dict) -> int:
        raise NotImplementedError

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        self.faults.count_bad_images(batch.get("skipped_images", []))
        total, losses = self.losses(batch)
        return loss_or_skip(self, total, losses, self.batch_size(batch))

    def configure_optimizers(self):
        total_steps = self.trainer.estimated_stepping_batches
        return build_optimizer(self.model, self.optimizer_cfg, self.scheduler_cfg, total_steps)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["perception_config"] = self.config_text
