"""On a CUDA machine (`pytest -m gpu`): the four-task model trains in bf16 with the whole batch on the
device (as Lightning moves it), with the test heads and with the demo config's heads and losses, runs in
fp16, also replayed from a CUDA graph, and is scored by evaluate() as on the CPU.

Found on an H200: the obstacle, light and lane criteria built CPU tensors next to device targets, the position
encodings broke a half-precision model, the matchers' CPU indices met device indices in the one-to-many class loss
(2026-12-04), a host-to-device copy in the box heads broke CUDA-graph capture (tests/test_graph_capture.py checks
that one on the CPU), and held-out scoring during a GPU training run handed host batches to the CUDA model
(2026-12-04, evening)."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict
from lightning.fabric.utilities.apply_func import move_data_to_device
from mmengine.config import Config

from perception.build import build_datamodule
from perception.config import parse_config
from perception.data.camera_dataset import collate_camera_batch, to_model_input
from perception.inference.cuda_graph import capture_cuda_graph
from perception.tasks import CAMERA_TASKS
from perception.training.assembly import build_system

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("heads", ["test", "demo"])
def test_four_task_training_step_in_bf16_and_fp16_inference_on_cuda(small_dataset, bdd_dataset, heads):
    overrides = dict(model=dict(TINY_MODEL, heads=ALL_HEADS), loss_weights=ALL_LOSS_WEIGHTS)
    if heads == "demo":  # deformable attention, denoising, one-to-many class targets, lane row kernels
        demo = Config.fromfile(os.path.join(ROOT, "configs", "demo_synthetic.py"))
        overrides = dict(model=demo.model.to_dict(), matcher=demo.matcher.to_dict(),
                         loss_weights=demo.loss_weights.to_dict())
    cfg = parse_config(experiment_dict(small_dataset, bdd100k=dict(data_root=bdd_dataset), **overrides))
    datamodule = build_datamodule(cfg)
    items = [datamodule.dataset("train")[i] for i in range(3)] + [datamodule.bdd100k_dataset("train")[i]
                                                                 for i in range(3)]
    batch = move_data_to_device(collate_camera_batch(items, CAMERA_TASKS), "cuda")
    system = build_system(cfg).cuda().train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        total, losses, _ = system._losses_and_outputs(batch)
    total.backward()
    assert torch.isfinite(total) and {"obstacle_cls", "lane_points", "light_cls", "drivable_ce"} <= set(losses)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in system.parameters())
    model = system.model.eval().half()
    with torch.no_grad():
        outputs = model(to_model_input(batch["images"]).half())
    assert all(v.dtype == torch.float16 and torch.isfinite(v).all() for v in outputs.values())
    images = to_model_input(batch["images"]).half()
    replayed = capture_cuda_graph(model, images)(images)
    torch.cuda.synchronize()
    assert all(torch.equal(replayed[k], v) for k, v in outputs.items())


def test_evaluation_of_a_model_on_cuda_matches_the_cpu(small_dataset, bdd_dataset, tmp_path):
    """Held-out scoring during a GPU training run hands evaluate() the model on the GPU while the loader's
    batches are on the host (it crashed on the first GPU training run); the scores must be the CPU's."""
    from perception.evaluation.evaluate import evaluate

    cfg = parse_config(experiment_dict(small_dataset, bdd100k=dict(data_root=bdd_dataset),
                                       model=dict(TINY_MODEL, heads=ALL_HEADS), loss_weights=ALL_LOSS_WEIGHTS))
    torch.manual_seed(0)
    model = build_system(cfg).model.eval()
    on_cpu = evaluate(cfg, None, str(tmp_path / "cpu"), predictor=model, num_workers=0)
    on_cuda = evaluate(cfg, None, str(tmp_path / "cuda"), predictor=model.cuda(), num_workers=0)
    assert set(on_cuda) == set(on_cpu) and "drivable/IoU" in on_cuda
    assert abs(on_cuda["drivable/IoU"] - on_cpu["drivable/IoU"]) < 0.01
