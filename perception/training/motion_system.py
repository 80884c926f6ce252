"""LightningModule for the trajectory forecaster: teacher-forced training, autoregressive validation."""

from __future__ import annotations

import torch
from torch import nn

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.losses.motion_loss import MotionCriterion
from perception.metrics.trajectory import TrajectoryMetrics
from perception.training.base_system import BaseSystem


def model_inputs(batch: dict) -> tuple[torch.Tensor, ...]:
    return batch["history"], batch["history_valid"], batch["lanes"], batch["lanes_valid"]


class MotionSystem(BaseSystem):
    monitor, monitor_mode = "val/motion_minADE_5", "min"

    def __init__(self, model: nn.Module, loss_weights: dict[str, float], optimizer: OptimizerConfig,
                 scheduler: SchedulerConfig, config_text: str = "", faults: FaultsConfig | None = None):
        super().__init__(model, optimizer, scheduler, config_text, faults)
        self.criterion = MotionCriterion()
        self.loss_weights = {name: float(loss_weights.get(name, 1.0)) for name in MotionCriterion.loss_names}
        self.self_fed = self.loss_weights["motion_reg_self_fed"] > 0
        self.val_metrics = TrajectoryMetrics(k=5)

    def batch_size(self, batch: dict) -> int:
        return batch["history"].shape[0]

    def losses(self, batch: dict, rollout: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        losses = self.criterion(self.model, model_inputs(batch), batch["future"], batch["future_valid"],
                                self_fed=self.self_fed, rollout=rollout)
        return sum(self.loss_weights[k] * v for k, v in losses.items()), losses

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        trajectories, probabilities = self.inference_model.forecast(*model_inputs(batch))
        total, _ = self.losses(batch, rollout=trajectories)  # the self-fed pass reuses this forecast
        self.log("val/loss", total, batch_size=self.batch_size(batch), sync_dist=True)
        self.val_metrics.update(trajectories.cpu().numpy(), probabilities.cpu().numpy(), batch["future"].cpu().numpy())

    def on_validation_epoch_end(self) -> None:
        for name, value in self.val_metrics.compute().items():
            self.log(f"val/motion_{name}", torch.tensor(value, device=self.device), prog_bar=name.startswith("minADE"),
                     sync_dist=True)
        self.val_metrics.reset()
