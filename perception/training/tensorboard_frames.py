"""Drawn validation frames in TensorBoard: the same few frames after every validation.

Frames are chosen once, deterministically (evenly spaced nuScenes front-camera images and
BDD100K-format frames of the validation splits), so successive validations show the same scenes
and the images tab's step slider shows the model learning. Drawn by the evaluation report's
``draw_frame``: every enabled task's predictions and the ground truth (magenta).
"""

from __future__ import annotations

import logging

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from perception.inference.predictors import ModulePredictor

LOGGER = logging.getLogger("perception.training")


def fixed_frames(datasets: list, per_dataset: int) -> list[tuple[object, int]]:
    """(dataset, index) pairs: evenly spaced over each dataset, nuScenes restricted to its front camera."""
    frames = []
    for dataset in datasets:
        if dataset is None or not len(dataset.infos):
            continue
        candidates = [i for i, info in enumerate(dataset.infos) if info.get("camera", "CAM_FRONT") == "CAM_FRONT"]
        candidates = candidates or list(range(len(dataset.infos)))
        picks = np.unique(np.linspace(0, len(candidates) - 1, per_dataset).round().astype(int))
        frames += [(dataset, candidates[p]) for p in picks]
    return frames


class TensorBoardFrames(L.Callback):
    def __init__(self, cfg, frames_per_dataset: int = 2):
        """``cfg``: the parsed ExperimentConfig."""
        super().__init__()
        self.cfg, self.frames_per_dataset = cfg, frames_per_dataset
        self.frames: list | None = None

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        if trainer.sanity_checking or not trainer.is_global_zero or logger is None:
            return
        from perception.data.image_io import ImageReadError
        from perception.evaluation.report_gallery import draw_frame

        if self.frames is None:
            datamodule = trainer.datamodule
            self.frames = fixed_frames([datamodule.dataset("val"), datamodule.bdd100k_dataset("val")],
                                       self.frames_per_dataset)
        model = pl_module.model
        was_training = model.training
        model.eval()
        predictor = ModulePredictor(model)
        try:
            with torch.no_grad():
                for k, (dataset, index) in enumerate(self.frames):
                    try:
                        drawn = draw_frame(self.cfg, dataset, index, predictor)
                    except ImageReadError as error:  # a training run must not die of a bad validation image
                        LOGGER.warning("TensorBoard frame %d skipped: %s", k, error)
                        continue
                    logger.experiment.add_image(f"val_frames/{k}_{dataset.name}", drawn, trainer.global_step,
                                                dataformats="HWC")
        finally:
            model.train(was_training)
