"""The camera perception LightningModule: criteria per task, weighted losses, the tasks' validation metrics."""

from __future__ import annotations

import torch
from torch import nn

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.data.camera_dataset import to_model_input
from perception.losses.task_losses import task_losses
from perception.training.base_system import BaseSystem


class PerceptionSystem(BaseSystem):
    def __init__(self, model: nn.Module, criteria: dict[str, nn.Module], loss_weights: dict[str, float],
                 optimizer: OptimizerConfig, scheduler: SchedulerConfig, config_text: str = "",
                 known_loss_names: tuple[str, ...] = (), faults: FaultsConfig | None = None,
                 validation_metrics: list | None = None):
        """``validation_metrics``: the enabled tasks' (perception.tasks.base.Task.validation_metric); the
        first one picks best.ckpt, else the validation loss does."""
        super().__init__(model, optimizer, scheduler, config_text, faults)
        self.criteria = nn.ModuleDict(criteria)
        produced = {name for c in criteria.values() for name in c.loss_names}
        # Weights of a disabled head are fine (configs inherit them); names no head knows are typos.
        unknown = set(loss_weights) - produced - set(known_loss_names)
        if unknown:
            raise ValueError(f"loss_weights has keys {sorted(unknown)} that no criterion produces; "
                             f"losses are {sorted(produced | set(known_loss_names))}")
        self.loss_weights = {name: float(loss_weights.get(name, 1.0)) for name in produced}
        self.validation_metrics = list(validation_metrics or [])
        if self.validation_metrics:
            self.monitor, self.monitor_mode = self.validation_metrics[0].name, self.validation_metrics[0].mode

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model(images)

    def batch_size(self, batch: dict) -> int:
        return batch["images"].shape[0]

    def _losses_and_outputs(self, batch: dict, model: nn.Module | None = None):
        model = self.model if model is None else model
        images = to_model_input(batch["images"])  # uint8 -> normalised, on the device
        if model.training:
            # Denoising queries are made from the targets; each head runs on the images with its labels.
            denoising = {task: self.criteria[task].denoising_targets(batch["targets"], images.device)
                         for task in model.denoising_tasks}
            labelled = {task: targets["valid"] for task, targets in batch["targets"].items() if task in model.heads}
            outputs = model(images, denoising or None, labelled=labelled)
        else:
            outputs = model(images)
        losses = task_losses(self.criteria, outputs, batch["targets"], model.heads)
        total = sum(self.loss_weights[name] * value for name, value in losses.items())
        return total, losses, outputs

    def losses(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        total, losses, _ = self._losses_and_outputs(batch)
        return total, losses

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.faults.count_bad_images(batch.get("skipped_images", []), stage="validation")
        total, losses, outputs = self._losses_and_outputs(batch, self.inference_model)
        batch_size = self.batch_size(batch)
        self.log("val/loss", total, batch_size=batch_size, sync_dist=True)
        for name, value in losses.items():  # per task and term, beside train/loss_<name>
            self.log(f"val/loss_{name}", value, batch_size=batch_size, sync_dist=True)
        for metric in self.validation_metrics:
            metric.update(outputs, batch["targets"])

    def on_validation_epoch_end(self) -> None:
        for metric in self.validation_metrics:
            value = metric.compute()
            metric.reset()
            self.log(metric.name, torch.tensor(value, device=self.device), prog_bar=True, sync_dist=True)
        skipped = float(self.faults.bad_image_counts["validation"])
        self.log("val/skipped_images", skipped, sync_dist=True, reduce_fx="sum")
