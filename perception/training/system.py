"""The LightningModule: a thin system wiring model, criteria, optimizer, schedule and metrics."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability
from perception.training.faults import FaultTracker, loss_or_skip
from perception.training.optim import build_optimizer


class PerceptionSystem(L.LightningModule):
    def __init__(self, model: nn.Module, criteria: dict[str, nn.Module], loss_weights: dict[str, float],
                 optimizer: OptimizerConfig, scheduler: SchedulerConfig, config_text: str = "",
                 known_loss_names: tuple[str, ...] = (), faults: FaultsConfig | None = None):
        super().__init__()
        self.model = model
        self.criteria = nn.ModuleDict(criteria)
        produced = {name for c in criteria.values() for name in c.loss_names}
        # Weights of a disabled head are fine (configs inherit them); names no head knows are typos.
        unknown = set(loss_weights) - produced - set(known_loss_names)
        if unknown:
            raise ValueError(f"loss_weights has keys {sorted(unknown)} that no criterion produces; "
                             f"losses are {sorted(produced | set(known_loss_names))}")
        self.loss_weights = {name: float(loss_weights.get(name, 1.0)) for name in produced}
        self.optimizer_cfg = optimizer
        self.scheduler_cfg = scheduler
        self.config_text = config_text
        self.val_drivable = BinaryIoU()
        faults = faults or FaultsConfig()
        self.faults = FaultTracker(faults.max_nonfinite_steps, faults.max_bad_images)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model(images)

    def _losses(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        outputs = self.model(batch["images"])
        losses: dict[str, torch.Tensor] = {}
        for criterion in self.criteria.values():
            losses.update(criterion(outputs, batch["targets"]))
        total = sum(self.loss_weights[name] * value for name, value in losses.items())
        return total, losses, outputs

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        self.faults.count_bad_images(batch.get("skipped_images", []))
        total, losses, _ = self._losses(batch)
        return loss_or_skip(self, total, losses, batch["images"].shape[0])

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.faults.count_bad_images(batch.get("skipped_images", []), stage="validation")
        total, losses, outputs = self._losses(batch)
        batch_size = batch["images"].shape[0]
        self.log("val/loss", total, batch_size=batch_size, sync_dist=True)
        for name, value in losses.items():  # per task and term, beside train/loss_<name>
            self.log(f"val/loss_{name}", value, batch_size=batch_size, sync_dist=True)
        if "drivable.logits" in outputs:
            target = batch["targets"]["drivable"]
            valid = target["valid"]
            probability = drivable_probability(outputs["drivable.logits"], target["mask"].shape[-2:])
            self.val_drivable.update(probability[valid] > 0.5, target["mask"][valid])

    def on_validation_epoch_end(self) -> None:
        iou = self.val_drivable.compute()["IoU"]
        self.val_drivable.reset()
        self.log("val/drivable_IoU", torch.tensor(iou, device=self.device), prog_bar=True, sync_dist=True)
        skipped = float(self.faults.bad_image_counts["validation"])
        self.log("val/skipped_images", skipped, sync_dist=True, reduce_fx="sum")

    def configure_optimizers(self):
        total_steps = self.trainer.estimated_stepping_batches
        return build_optimizer(self.model, self.optimizer_cfg, self.scheduler_cfg, total_steps)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["perception_config"] = self.config_text

