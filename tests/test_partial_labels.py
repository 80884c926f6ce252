"""Partial labels: a task's loss sees only the images that carry its labels.

An image without lane labels must contribute exactly zero lane gradient (no "nothing here"
signal from a missing label); an image labelled with zero lanes must push lane scores down.
The same holds for the obstacle and traffic-light heads. Images are independent in the network
(Swin's LayerNorm, GroupNorm in the heads, no batch statistics), so zero gradient is exact.
"""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch
from mmengine.config import Config

from perception.build import build_criteria, build_model
from perception.config import parse_config
from perception.data.camera_dataset import collate_camera_batch, to_model_input
from perception.data.mixing import MixedDataset
from perception.data.sampling import item_index
from perception.losses.task_losses import task_losses
from perception.tasks import CAMERA_TASKS
from tests.conftest import ALL_HEADS, ALL_LOSS_WEIGHTS, TINY_MODEL, experiment_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TASK_LOSSES = {"lanes": ("lane_cls", "lane_points", "lane_visibility", "lane_mask"),
               "lights": ("light_cls", "light_l1", "light_giou"),
               "obstacles": ("obstacle_cls", "obstacle_l1", "obstacle_giou", "obstacle_center", "obstacle_depth")}


@pytest.fixture(scope="module")
def mixed_batch(small_dataset, bdd_dataset):
    """Two nuScenes images and two BDD100K images, evaluation transform, with their criteria and model."""
    from perception.build import build_datamodule

    cfg = parse_config(experiment_dict(small_dataset, model=dict(TINY_MODEL, heads=ALL_HEADS),
                                       loss_weights=ALL_LOSS_WEIGHTS, bdd100k=dict(data_root=bdd_dataset)))
    datamodule = build_datamodule(cfg)
    nuscenes, bdd = datamodule.dataset("val"), datamodule.bdd100k_dataset("val")
    with_lanes = [i for i, info in enumerate(nuscenes.infos)
                  if info["lanes"]["labels"] and info["camera"] in cfg.lane_cameras][:2]
    with_lights = [i for i in range(len(bdd)) if bdd.infos[i]["lights"]["labels"]][:2]
    items = [nuscenes[i] for i in with_lanes] + [bdd[i] for i in with_lights]
    batch = collate_camera_batch(items, CAMERA_TASKS)
    torch.manual_seed(0)
    return cfg, batch, build_model(cfg.model, tuple(cfg.input_size)), build_criteria(cfg)


def _task_loss(model, criteria, images, targets, task):
    outputs = model(images)
    losses = task_losses({task: criteria[task]}, outputs, targets, model.heads)
    return sum(losses[name] for name in TASK_LOSSES[task]), outputs


def test_each_dataset_flags_the_tasks_it_labels(mixed_batch, small_dataset):
    cfg, batch, _, _ = mixed_batch
    valid = {task: batch["targets"][task]["valid"].tolist() for task in batch["targets"]}
    assert valid["obstacles"] == [True, True, False, False]  # BDD100K has no 3D boxes
    assert valid["lights"] == [False, False, True, True]  # nuScenes has no light states
    assert valid["lanes"] == [True, True, True, True]
    assert valid["drivable"] == [True, True, True, True]
    # nuScenes side cameras: lanes are "not labelled", not "no lanes".
    from perception.build import build_datamodule

    nuscenes = build_datamodule(cfg).dataset("val")
    side = next(i for i, info in enumerate(nuscenes.infos) if info["camera"] == "CAM_FRONT_LEFT")
    item = nuscenes[side]
    assert item["targets"]["lanes"]["valid"] is False and item["meta"]["lanes_gt"] is None


@pytest.mark.parametrize("task", ["lanes", "lights", "obstacles"])
def test_an_image_without_labels_contributes_zero_gradient(mixed_batch, task):
    _, batch, model, criteria = mixed_batch
    model.train()
    targets = copy.deepcopy(batch["targets"])
    targets[task]["valid"] = torch.tensor([True, False, True, False]) if task == "lanes" else targets[task]["valid"]
    unlabelled = [i for i, v in enumerate(targets[task]["valid"].tolist()) if not v]
    images = to_model_input(batch["images"]).requires_grad_(True)
    loss, _ = _task_loss(model, criteria, images, targets, task)
    assert loss.item() > 0
    loss.backward()
    for i in range(4):
        grad = images.grad[i].abs().max().item()
        if i in unlabelled:
            assert grad == 0.0, f"{task}: image {i} has no {task} labels but receives gradient {grad}"
        else:
            assert grad > 0.0, f"{task}: labelled image {i} receives no gradient"
    # Whatever the unlabelled images' labels say (here: another image's objects), the loss is the same.
    scrambled = copy.deepcopy(targets)
    labelled = next(i for i in range(4) if i not in unlabelled)
    for i in unlabelled:
        scrambled[task]["per_image"][i] = scrambled[task]["per_image"][labelled]
    with torch.no_grad():
        again, _ = _task_loss(model, criteria, to_model_input(batch["images"]), scrambled, task)
    assert again.item() == pytest.approx(loss.item(), rel=1e-5)


@pytest.mark.parametrize("task", ["lanes", "lights", "obstacles"])
def test_an_image_labelled_empty_pushes_scores_down(mixed_batch, task):
    _, batch, model, criteria = mixed_batch
    model.train()
    targets = copy.deepcopy(batch["targets"])
    empty = copy.deepcopy(targets[task]["per_image"][0])
    if task == "lanes":
        empty["polylines"], empty["labels"] = [], torch.zeros(0, dtype=torch.int64)
    else:
        empty["boxes_xyxy"], empty["labels"] = torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64)
        for key in ("center_uv", "center_cam", "size_wlh", "yaw", "velocity", "attributes"):
            if key in empty:
                empty[key] = empty[key][:0]
    targets[task]["per_image"] = [empty] * 4
    targets[task]["valid"] = torch.tensor([True, False, False, False])
    loss, outputs = _task_loss(model, criteria, to_model_input(batch["images"]), targets, task)
    assert loss.item() > 0, "an image labelled with no objects must still produce a loss"
    logits = outputs[f"{task}.logits"]
    grad, = torch.autograd.grad(loss, logits)
    assert (grad[0] > 0).all(), "every query's score of the empty image must be pushed down"
    assert (grad[1:] == 0).all()


def _all_losses_and_gradients(model, criteria, images, targets, labelled):
    denoising = {task: criteria[task].denoising_targets(targets, images.device) for task in model.denoising_tasks}
    torch.manual_seed(0)  # the denoising noise
    outputs = model(images, denoising or None, labelled=labelled)
    losses = task_losses(criteria, outputs, targets, model.heads)
    model.zero_grad()
    sum(losses.values()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return {name: value.item() for name, value in losses.items()}, grads


@pytest.mark.parametrize("heads", ["test", "denoising", "demo"])
def test_each_head_run_on_its_labelled_images_alone_gives_the_full_batch_losses_and_gradients(mixed_batch, heads,
                                                                                               small_dataset,
                                                                                               bdd_dataset):
    """``labelled`` (training): each head runs on the images with its labels only. The losses and every weight's
    gradient must be those of running every head on the whole batch, including a task labelled on no image.
    ``demo``: the heads, matcher and loss weights of configs/demo_synthetic.py (deformable cross-attention, lane row
    kernels, one-to-many class targets), which trains this way."""
    cfg, batch, model, criteria = mixed_batch
    denoising = heads == "denoising"
    if heads != "test":
        overrides = dict(bdd100k=dict(data_root=bdd_dataset))
        if denoising:  # the box heads' denoising queries are made per image from the targets: they must follow it
            overrides["model"] = dict(TINY_MODEL, heads={
                **ALL_HEADS, "obstacles": dict(ALL_HEADS["obstacles"], denoising_queries=20),
                "lights": dict(ALL_HEADS["lights"], denoising_queries=10)})
        else:
            demo = Config.fromfile(os.path.join(ROOT, "configs", "demo_synthetic.py"))
            overrides.update(model=demo.model.to_dict(), matcher=demo.matcher.to_dict(),
                             loss_weights=demo.loss_weights.to_dict())
        torch.manual_seed(0)
        other = parse_config(experiment_dict(small_dataset, **overrides))
        model, criteria = build_model(other.model, tuple(cfg.input_size)), build_criteria(other)
        assert set(model.denoising_tasks) == ({"obstacles", "lights"} if denoising else set())
    model.train()
    targets = copy.deepcopy(batch["targets"])
    targets["lanes"]["valid"] = torch.tensor([True, False, True, False])  # lanes on a subset too
    images = to_model_input(batch["images"])
    for case in ("mixed", "no lights"):
        if case == "no lights":
            targets["lights"]["valid"] = torch.zeros(4, dtype=torch.bool)
        labelled = {task: targets[task]["valid"] for task in targets}
        full_losses, full_grads = _all_losses_and_gradients(model, criteria, images, targets, None)
        losses, grads = _all_losses_and_gradients(model, criteria, images, targets, labelled)
        assert set(grads) == set(full_grads), f"{case}: some weights lost their gradient"
        if denoising:  # the noise is drawn per batch row, so the box heads' losses are equal in law only
            assert all(math.isfinite(v) for v in losses.values()), losses
            same = {n: v for n, v in full_losses.items() if n.startswith(("drivable", "lane"))}
            assert {n: losses[n] for n in same} == pytest.approx(same, rel=1e-5, abs=1e-6), case
            continue
        assert losses == pytest.approx(full_losses, rel=1e-5, abs=1e-6), case
        for name, grad in full_grads.items():
            # 1e-6 absolute: some gradients are zero in exact arithmetic (a key bias under softmax) and 1e-10 here
            tolerance = 1e-4 * grad.abs().max().item() + 1e-6
            assert (grads[name] - grad).abs().max().item() <= tolerance, f"{case}: gradient of {name}"
    assert all(losses[name] == 0.0 for name in TASK_LOSSES["lights"])  # labelled on no image: nothing to learn


def test_a_head_run_on_some_images_returns_batch_sized_outputs_with_zero_rows_elsewhere(mixed_batch):
    _, batch, model, _ = mixed_batch
    model.train()
    images = to_model_input(batch["images"])
    labelled = {"lights": torch.tensor([False, False, True, True])}
    with torch.no_grad():
        full, subset = model(images), model(images, labelled=labelled)
    for name, value in full.items():
        assert subset[name].shape == value.shape, name
        if name.startswith("lights."):
            assert torch.equal(subset[name][:2], torch.zeros_like(value[:2])), name
            torch.testing.assert_close(subset[name][2:], value[2:], atol=1e-5, rtol=1e-4)
        else:
            assert torch.equal(subset[name], value), name


class _Values:
    """A dataset of plain values, keyed like the camera datasets ((epoch, index) or index)."""

    def __init__(self, values):
        self.values = values

    def __len__(self):
        return len(self.values)

    def __getitem__(self, key):
        return self.values[item_index(key)]


def test_mixed_dataset_draws_each_source_in_its_fraction_and_walks_it_over_epochs():
    small, large = list(range(10)), list(range(100, 190))
    mixed = MixedDataset([_Values(small), _Values(large)], [0.5, 0.5], length=40)
    epoch0 = [mixed[(0, i)] for i in range(40)]
    assert sum(v < 100 for v in epoch0) == 20  # half from each, whatever their sizes
    assert sorted(v for v in epoch0 if v < 100) == sorted(small * 2)  # the small source repeats
    seen = {mixed[(e, i)] for e in range(5) for i in range(20, 40)}
    assert seen == set(large)  # the large one is walked through, not truncated to its first 20
    # Fractions equal to the sizes: a concatenation, whatever the epoch (validation keys carry one too).
    concatenated = MixedDataset([_Values(small), _Values(large)], [len(small), len(large)])
    assert [concatenated[(3, i)] for i in range(len(concatenated))] == small + large
    with pytest.raises(ValueError, match="empty"):
        MixedDataset([_Values([]), _Values(large)], [0.5, 0.5])
