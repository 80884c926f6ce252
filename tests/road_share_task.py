"""A fifth camera task that exists only for the test suite, written as a new task would be: one file.

Road share: the fraction of an image's labelled pixels that are drivable, regressed from the coarsest
FPN level. Nothing outside this file names it; ``tests/test_task_spec.py`` trains, validates,
evaluates, draws and exports it through the package's own code paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch
from torch import nn

from perception.data.drivable_projection import IGNORE_INDEX
from perception.tasks import CAMERA_TASKS, ScoringContext, Task


@dataclass
class RoadShareHeadConfig:
    hidden: int = 16


class RoadShareHead(nn.Module):
    """FPN levels -> ``road_share.logit`` [B]: sigmoid(logit) = share of drivable pixels."""

    def __init__(self, in_channels: int, hidden: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        pooled = levels[-1].mean(dim=(2, 3))  # [B,C] from stride 32
        return {"road_share.logit": self.mlp(pooled)[:, 0]}


class RoadShareCriterion(nn.Module):
    loss_names = ("road_share_l1",)

    def forward(self, outputs: dict, targets: dict) -> dict[str, torch.Tensor]:
        prediction, target = outputs["road_share.logit"].sigmoid(), targets["road_share"]
        valid = target["valid"].to(prediction.device)
        if not bool(valid.any()):
            return {"road_share_l1": prediction.sum() * 0.0}
        return {"road_share_l1": (prediction[valid] - target["share"].to(prediction.device)[valid]).abs().mean()}


class ValidationError:
    name, mode = "val/road_share_MAE", "min"

    def __init__(self):
        self.reset()

    def update(self, outputs: dict, targets: dict) -> None:
        valid = targets["road_share"]["valid"]
        error = (outputs["road_share.logit"].sigmoid().cpu() - targets["road_share"]["share"]).abs()[valid]
        self.total, self.count = self.total + float(error.sum()), self.count + int(valid.sum())

    def compute(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def reset(self) -> None:
        self.total, self.count = 0.0, 0


def drivable_share(mask: np.ndarray) -> float | None:
    known = mask != IGNORE_INDEX
    return float((mask[known] == 1).mean()) if known.any() else None


class RoadShareTask(Task):
    name = "road_share"
    config_class = RoadShareHeadConfig
    labelled_datasets = ("nuscenes", "bdd100k")
    loss_names = RoadShareCriterion.loss_names
    output_meanings = {"road_share.logit": "[B] logit of the share of drivable pixels"}
    postprocess_code = "tests.road_share_task.RoadShareTask.decode (sigmoid)"

    def build_head(self, head, in_channels, input_size):
        return RoadShareHead(in_channels, head.hidden)

    def build_criterion(self, cfg):
        return RoadShareCriterion()

    def empty_targets(self) -> dict:
        return {"valid": False, "share": 0.0}

    def item_targets(self, dataset, info, out):
        share = None if out["mask"] is None else drivable_share(out["mask"])
        return None if share is None else {"valid": True, "share": share}

    def collate(self, targets, input_size):
        return {"valid": torch.tensor([bool(t["valid"]) for t in targets]),
                "share": torch.tensor([float(t["share"]) for t in targets])}

    def validation_metric(self):
        return ValidationError()

    def decode(self, outputs, i, input_size, affine, orig_size, post, input_intrinsics=None) -> float:
        return float(torch.as_tensor(outputs["road_share.logit"][i]).sigmoid())

    def draw(self, canvas, prediction, intrinsics, min_score) -> None:
        cv2.putText(canvas, f"road {prediction:.0%}", (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 0), 2)

    def image_result(self, cfg, dataset, outputs, i, meta, info) -> dict:
        truth = dataset.read_drivable_truth(meta)
        share = None if truth is None else drivable_share(truth)
        if share is None:
            return {}
        predicted = self.decode(outputs, i, cfg.input_size, meta["affine"], meta["orig_size"], cfg.postprocess)
        return {"road_share_error": abs(predicted - share)}

    def score(self, results, context: ScoringContext) -> dict[str, float]:
        errors = [r["road_share_error"] for r in results if "road_share_error" in r]
        return {"road_share/MAE": float(np.mean(errors))} if errors else {}


ROAD_SHARE = RoadShareTask()
TASKS_WITH_ROAD_SHARE = CAMERA_TASKS + (ROAD_SHARE,)
