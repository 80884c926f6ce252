"""What every LightningModule of the package shares: the optimizer and schedule, fault handling,
the config stored in checkpoints and the training step. Subclasses say how a batch becomes losses."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from perception.config import FaultsConfig, OptimizerConfig, SchedulerConfig
from perception.training.ema import ema_decay_at, frozen_copy, update_ema
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
        # optimizer.ema_decay > 0: the weights' moving average, what validation, evaluation and export use.
        self.ema_model = frozen_copy(model) if optimizer.ema_decay > 0 else None
        if self.ema_model is not None:  # updates so far, in the state dict: the decay's ramp resumes exactly
            self.register_buffer("ema_updates", torch.zeros((), dtype=torch.int64))

    @property
    def inference_model(self) -> nn.Module:
        """The weights to score: the moving average when there is one, else the model being trained."""
        return self.ema_model if self.ema_model is not None else self.model

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        # Here, not in on_train_batch_end: a checkpoint callback saving at this step runs before the module's
        # on_train_batch_end, and would store the average one update behind the weights.
        if self.ema_model is not None:
            update_ema(self.ema_model, self.model, ema_decay_at(int(self.ema_updates), self.optimizer_cfg.ema_decay))
            self.ema_updates += 1

    def losses(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def clip_parts(self) -> list[list[nn.Parameter]]:
        """The parameter groups ``optimizer.clip_per_part`` clips one by one: the shared trunk (backbone and
        neck) and each head of a multi-head model (``True``), or only the listed heads on their own and the
        trunk with every other head as one part (a list); the whole model without heads. A head's own neck
        (``model.own_necks``) is clipped with its head."""
        heads = getattr(self.model, "heads", None)
        if not isinstance(heads, nn.ModuleDict):
            return [list(self.model.parameters())]
        chosen = self.optimizer_cfg.clip_per_part
        separate = list(heads) if chosen is True else [name for name in heads if name in chosen]
        parts: dict[str, list[nn.Parameter]] = {"": [], **{name: [] for name in separate}}
        for name, parameter in self.model.named_parameters():
            prefix, _, rest = name.partition(".")
            head = rest.split(".")[0] if prefix in ("heads", "own_necks") else ""
            parts[head if head in separate else ""].append(parameter)
        return list(parts.values())

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if not (self.optimizer_cfg.clip_per_part and gradient_clip_val):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        for params in self.clip_parts():
            torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], float(gradient_clip_val))

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
