"""On a CUDA machine (`pytest -m gpu`): the four-task model trains in bf16 with the whole batch on the
device (as Lightning moves it) and runs in fp16. Found on an H200: the obstacle, light and lane criteria
built CPU tensors next to device targets, and the position encodings broke a half-precision model."""

from __future__ import annotations

import pytest
import torch
from conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict
from lightning.fabric.utilities.apply_func import move_data_to_device

from perception.build import build_datamodule
from perception.config import parse_config
from perception.data.camera_dataset import collate_camera_batch, to_model_input
from perception.tasks import CAMERA_TASKS
from perception.training.assembly import build_system

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_four_task_training_step_in_bf16_and_fp16_inference_on_cuda(small_dataset, bdd_dataset):
    cfg = parse_config(experiment_dict(small_dataset, model=dict(TINY_MODEL, heads=ALL_HEADS),
                                       loss_weights=ALL_LOSS_WEIGHTS, bdd100k=dict(data_root=bdd_dataset)))
    datamodule = build_datamodule(cfg)
    items = [datamodule.dataset("train")[i] for i in range(3)] + [datamodule.bdd100k_dataset("train")[i]
                                                                 for i in range(3)]
    batch = move_data_to_device(collate_camera_batch(items, CAMERA_TASKS), "cuda")
    system = build_system(cfg).cuda().train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        total, losses, _ = system._losses(batch)
    total.backward()
    assert torch.isfinite(total) and {"obstacle_cls", "lane_points", "light_cls", "drivable_ce"} <= set(losses)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in system.parameters())
    model = system.model.eval().half()
    with torch.no_grad():
        outputs = model(to_model_input(batch["images"]).half())
    assert all(v.dtype == torch.float16 and torch.isfinite(v).all() for v in outputs.values())
