"""The LightningModule: a thin system wiring model, criteria, optimizer, schedule and metrics."""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from perception.config import OptimizerConfig, SchedulerConfig
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability

# Parameters that should not be decayed: norms, biases, Swin's position tables.
_NO_DECAY = ("norm", "bias", "relative_position_bias_table", "absolute_pos_embed")


class PerceptionSystem(L.LightningModule):
    def __init__(self, model: nn.Module, criteria: dict[str, nn.Module], loss_weights: dict[str, float],
                 optimizer: OptimizerConfig, scheduler: SchedulerConfig, config_text: str = "",
                 known_loss_names: tuple[str, ...] = ()):
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

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model(images)

    def _losses(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        outputs = self.model(batch["images"])
        losses: dict[str, torch.Tensor] = {}
        for criterion in self.criteria.values():
            losses.update(criterion(outputs, batch["targets"]))
        total = sum(self.loss_weights[name] * value for name, value in losses.items())
        return total, losses, outputs

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        total, losses, _ = self._losses(batch)
        if not torch.isfinite(total):
            details = ", ".join(f"{k}={v.item():.4g}" for k, v in losses.items())
            raise FloatingPointError(f"non-finite training loss at step {self.global_step}: {details}")
        batch_size = batch["images"].shape[0]
        self.log("train/loss", total, prog_bar=True, batch_size=batch_size)
        for name, value in losses.items():
            self.log(f"train/loss_{name}", value, batch_size=batch_size)
        return total

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        total, losses, outputs = self._losses(batch)
        batch_size = batch["images"].shape[0]
        self.log("val/loss", total, batch_size=batch_size, sync_dist=True)
        if "drivable.logits" in outputs:
            target = batch["targets"]["drivable"]
            valid = target["valid"]
            probability = drivable_probability(outputs["drivable.logits"], target["mask"].shape[-2:])
            self.val_drivable.update(probability[valid] > 0.5, target["mask"][valid])

    def on_validation_epoch_end(self) -> None:
        iou = self.val_drivable.compute()["IoU"]
        self.val_drivable.reset()
        self.log("val/drivable_IoU", torch.tensor(iou, device=self.device), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        cfg = self.optimizer_cfg
        groups: dict[tuple[bool, bool], list] = {}
        for name, parameter in self.model.named_parameters():
            if not parameter.requires_grad:
                continue
            is_backbone = name.startswith("backbone.")
            no_decay = parameter.ndim <= 1 or any(token in name for token in _NO_DECAY)
            groups.setdefault((is_backbone, no_decay), []).append(parameter)
        param_groups = [
            {"params": params, "lr": cfg.lr * (cfg.backbone_lr_mult if is_backbone else 1.0),
             "weight_decay": 0.0 if no_decay else cfg.weight_decay}
            for (is_backbone, no_decay), params in sorted(groups.items())
        ]
        optimizer = torch.optim.AdamW(param_groups, lr=cfg.lr, betas=tuple(cfg.betas))
        total_steps = max(int(self.trainer.estimated_stepping_batches), 1)
        schedule = warmup_cosine(self.scheduler_cfg, total_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["perception_config"] = self.config_text


def warmup_cosine(cfg: SchedulerConfig, total_steps: int):
    """LR multiplier per optimizer step: linear warmup, then cosine down to min_lr_ratio."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))

    def factor(step: int) -> float:
        if step < warmup:
            return cfg.warmup_ratio + (1.0 - cfg.warmup_ratio) * step / max(warmup, 1)
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
