"""Held-out scores during training: the learning curve that says whether a model generalises.

Every ``every_n_steps`` optimizer steps (and once at the end) the model is scored on the
config's validation split, scenes it never trains on, by the same ``evaluate`` that
``tools/test.py`` runs (devkit mAP / NDS, lane F1, light AP50, drivable IoU). The figures are
logged as ``heldout/<task>/<metric>`` at that step, next to ``train/loss``, so the CSV log holds
both halves of the curve (``perception.training.curves`` draws them).
"""

from __future__ import annotations

import logging
import os
import time

import lightning as L

# The metrics worth a curve; others stay in the evaluation's own JSON.
CURVE_METRICS = ("nuscenes/mAP", "nuscenes/NDS", "lanes/F1", "lights/AP50", "drivable/IoU", "drivable/IoU_bdd100k")


LOGGER = logging.getLogger("perception.training")


class HeldOutEvaluation(L.Callback):
    def __init__(self, cfg, work_dir: str, every_n_steps: int):
        """``cfg``: the parsed ExperimentConfig."""
        super().__init__()
        self.cfg, self.every_n_steps = cfg, every_n_steps
        self.directory = os.path.join(work_dir, "heldout")
        self.last_step = -1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps > 0 and trainer.global_step % self.every_n_steps == 0:
            self._score(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._score(trainer, pl_module)

    def _score(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from perception.data.image_io import ImageReadError
        from perception.evaluation.evaluate import evaluate

        step = trainer.global_step
        if step == self.last_step:
            return
        self.last_step = step
        start = time.time()
        model = pl_module.inference_model  # the moving average of the weights when optimizer.ema_decay > 0
        was_training = model.training
        model.eval()
        try:
            metrics = evaluate(self.cfg, None, os.path.join(self.directory, f"step_{step}"), predictor=model)
        except ImageReadError as error:  # evaluation is strict; a training run must not die of it
            LOGGER.warning("held-out evaluation at step %d skipped: %s", step, error)
            return
        finally:
            model.train(was_training)
        scores = {f"heldout/{k}": float(metrics[k]) for k in CURVE_METRICS if k in metrics}
        for logger in trainer.loggers:
            logger.log_metrics(scores, step=step)
        if trainer.is_global_zero:
            print(f"held-out at step {step} ({time.time() - start:.0f} s): "
                  + ", ".join(f"{k[len('heldout/'):]} {v:.3f}" for k, v in scores.items()), flush=True)
