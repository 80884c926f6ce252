"""Adding a task is one file: the test-only ``road_share`` task (tests/road_share_task.py) goes through
config parsing, the real Lightning training with its validation metric, evaluation, the inference
pipeline and drawing, and the ONNX export with its sidecar, with no other file naming it."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from mmengine.config import Config

from perception.config import ConfigError, parse_config
from perception.data.camera_dataset import to_model_input
from perception.evaluation.evaluate import evaluate
from perception.export.camera_onnx import export_camera_model
from perception.inference.annotate import annotate
from perception.inference.pipeline import Perceiver
from perception.inference.predictors import TorchPredictor
from perception.tasks import CAMERA_TASKS
from perception.training.runner import train
from tests.conftest import TINY_MODEL, experiment_dict
from tests.road_share_task import ROAD_SHARE, TASKS_WITH_ROAD_SHARE


def _config(data_root: str) -> dict:
    heads = dict(TINY_MODEL["heads"], road_share=dict(hidden=8))
    trainer = experiment_dict(data_root)["trainer"] | dict(val_check_interval=2, max_steps=2)
    return experiment_dict(data_root, model=dict(TINY_MODEL, heads=heads), trainer=trainer,
                           loss_weights=dict(drivable_ce=1.0, drivable_dice=1.0, road_share_l1=1.0))


def test_the_task_tuple_decides_which_heads_a_config_may_name(small_dataset):
    with pytest.raises(ConfigError, match="model.heads.road_share"):
        parse_config(_config(small_dataset))  # the shipped tuple does not know it
    cfg = parse_config(_config(small_dataset), TASKS_WITH_ROAD_SHARE)
    assert [task.name for task in cfg.model.heads.enabled] == ["drivable", "road_share"]
    assert cfg.model.heads.road_share.hidden == 8
    assert [t.name for t in parse_config(experiment_dict(small_dataset)).model.heads.enabled] == ["drivable"]
    assert all(task.name != "road_share" for task in CAMERA_TASKS)


def test_a_task_from_one_file_trains_validates_evaluates_draws_and_exports(small_dataset, tmp_path):
    work_dir = str(tmp_path / "work")
    trained = train(Config(_config(small_dataset)), work_dir, tasks=TASKS_WITH_ROAD_SHARE)
    assert np.isfinite(trained["train/loss_road_share_l1"]) and 0.0 <= trained["val/road_share_MAE"] <= 1.0
    assert "val/drivable_IoU" in trained  # the first enabled task's metric still picks best.ckpt

    cfg = parse_config(_config(small_dataset), TASKS_WITH_ROAD_SHARE)
    checkpoint = os.path.join(work_dir, "checkpoints", "last.ckpt")
    predictor = TorchPredictor(cfg, checkpoint)
    metrics = evaluate(cfg, checkpoint, str(tmp_path / "eval"), num_workers=0, predictor=predictor)
    assert 0.0 <= metrics["road_share/MAE"] <= 1.0 and "drivable/IoU" in metrics

    # The score is the task's own: recompute it for the validation images through the datamodule.
    from perception.build import build_datamodule
    from tests.road_share_task import drivable_share

    dataset = build_datamodule(cfg).dataset("val")
    errors = []
    for index in range(len(dataset)):
        item = dataset[index]
        with torch.no_grad():
            share = float(predictor(to_model_input(item["image"][None]))["road_share.logit"][0].sigmoid())
        errors.append(abs(share - drivable_share(dataset.read_drivable_truth(item["meta"]))))
    assert metrics["road_share/MAE"] == pytest.approx(float(np.mean(errors)), abs=1e-5)

    image = np.full((270, 480, 3), 90, np.uint8)
    perceiver = Perceiver(predictor, tuple(cfg.input_size), cfg.postprocess, cfg.model.heads.enabled)
    prediction = perceiver([image])[0]
    assert 0.0 <= prediction["road_share"] <= 1.0 and prediction.drivable.shape == (270, 480)
    drawn = annotate(image, prediction, np.eye(3), perceiver.tasks, with_bev=False)
    assert drawn.shape == image.shape and (drawn != image).any()

    sidecar = export_camera_model(predictor.model, tuple(cfg.input_size), str(tmp_path / "model.onnx"), batch=2,
                                  fp16_images=2, tasks=cfg.model.heads.enabled)
    assert sidecar["checks"]["passed"]
    assert sidecar["outputs"]["road_share.logit"]["meaning"] == ROAD_SHARE.output_meanings["road_share.logit"]
    assert sidecar["postprocess"]["code"]["road_share"] == ROAD_SHARE.postprocess_code
