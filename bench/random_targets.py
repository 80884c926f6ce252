"""Training targets of every task for a batch of random images, shaped as collate_camera_batch makes them.

Benchmarks time the real criteria on these; each task's targets start from its spec's own
``empty_targets`` and are batched by its ``collate``, so the benches stay in step when a task gains a key.
"""

from __future__ import annotations

import torch

from perception.tasks import CAMERA_TASKS, LIGHTS, OBSTACLES


def random_obstacles(count: int, height: int, width: int) -> dict:
    """Plausible obstacle targets (input pixels, camera frame)."""
    x0, y0 = torch.rand(count) * width * 0.8, torch.rand(count) * height * 0.8
    w, h = torch.rand(count) * width * 0.2 + 4, torch.rand(count) * height * 0.2 + 4
    boxes = torch.stack([x0, y0, x0 + w, y0 + h], dim=1)
    return {**OBSTACLES.empty_targets(), "valid": True, "boxes_xyxy": boxes, "labels": torch.randint(0, 10, (count,)),
            "center_uv": boxes[:, :2] + 2, "center_cam": torch.rand(count, 3) * 30 + 2,
            "size_wlh": torch.rand(count, 3) + 0.5, "yaw": torch.rand(count) * 6 - 3,
            "velocity": torch.randn(count, 2), "attributes": torch.randint(-1, 8, (count,)),
            "intrinsics": torch.tensor([[width * 0.8, 0, width / 2], [0, width * 0.8, height / 2], [0, 0, 1.0]])}


def random_lanes(count: int, height: int, width: int) -> dict:
    """Straight lanes from the image bottom towards the middle (input pixels)."""
    polylines = []
    for _ in range(count):
        x_bottom, x_top = float(torch.rand(1)) * width, width / 2 + float(torch.randn(1)) * width * 0.05
        polylines.append(torch.tensor([[x_bottom, height - 1.0], [x_top, height * 0.4]]))
    return {"valid": True, "polylines": polylines, "labels": torch.randint(0, 2, (count,))}


def random_lights(count: int, height: int, width: int) -> dict:
    x0, y0 = torch.rand(count) * width * 0.9, torch.rand(count) * height * 0.4
    boxes = torch.stack([x0, y0, x0 + 6, y0 + 14], dim=1)
    return {**LIGHTS.empty_targets(), "valid": True, "boxes_xyxy": boxes, "labels": torch.randint(0, 4, (count,))}


# Share of the demo's training images that carry each task's labels (20 batches of configs/demo_synthetic.py:
# BDD100K-format frames have no 3D boxes, nuScenes-format ones no lights, nuScenes side cameras no lanes).
DEMO_LABELLED_SHARE = {"drivable": 1.0, "obstacles": 0.56, "lanes": 0.62, "lights": 0.44}


def random_targets(batch: int, height: int, width: int, device: str = "cpu",
                   labelled_share: dict[str, float] | None = None) -> dict:
    """Every camera task's batch targets, as ``collate_camera_batch`` makes them. ``labelled_share``: per task,
    the share of the images that carry its labels (the others are marked ``valid`` False, as in a mixed batch);
    None: every image carries every task's labels."""
    makers = {"drivable": lambda: {"valid": True, "mask": torch.randint(0, 2, (height, width))},
              "obstacles": lambda: random_obstacles(12, height, width), "lanes": lambda: random_lanes(4, height, width),
              "lights": lambda: random_lights(3, height, width)}
    names = [task.name for task in CAMERA_TASKS]
    assert set(makers) == set(names), f"random_targets knows {sorted(makers)}, the task specs {names}"
    targets = {task.name: task.collate([makers[task.name]() for _ in range(batch)], (height, width))
               for task in CAMERA_TASKS}
    targets["drivable"] = {key: value.to(device) for key, value in targets["drivable"].items()}
    for task, share in (labelled_share or {}).items():
        count = min(batch, max(1, round(share * batch)))
        targets[task]["valid"] = torch.arange(batch, device=targets[task]["valid"].device) < count
    if torch.device(device).type != "cpu":  # the whole batch, per-image lists too, as Lightning moves it in training
        from lightning.fabric.utilities.apply_func import move_data_to_device

        targets = move_data_to_device(targets, device)
    return targets
