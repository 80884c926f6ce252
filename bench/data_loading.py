#!/usr/bin/env python
"""Data-loading throughput per worker core vs the training-step rate: how many workers feed one device.

    python bench/data_loading.py [--items 60] [--step-ms 250 --step-batch 8]

Writes a few 1600x900 synthetic nuScenes camera images (real JPEGs), builds the label cache,
then times, in this one process (= one loader worker):
  - baseline: cv2 decode + resize to 800 wide + flip + colour jitter (the usual minimal pipeline)
  - ours, full decode: our training item (decode, scale jitter, crop to 448x800, flip with 3D
    targets, photometric augmentation, label mask, every task's targets; a uint8 image: the
    normalisation runs per batch on the device, ``to_model_input``)
  - ours, half-size decode: the same with JPEG decoding at half resolution whenever the sampled
    scale is <= 0.6 (the training default; at most a 1.2x upsample of the half-size image)
the photometric step alone on a 448x800 image (albumentations' ColorJitter + GaussNoise +
GaussianBlur, as the loader used before, against perception.data.photometric, same probabilities),
the per-batch normalisation on this CPU, and the training step of the demo network at 448x800 on
this machine, for the ratio. Pass a device's measured step time (--step-ms, --step-batch) to size
the loader for it instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import albumentations as A  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from random_targets import random_targets  # noqa: E402  (bench/random_targets.py, this folder)

INPUT_SIZE = (448, 800)


def rate(fn, items: int) -> float:
    fn(0)  # warm-up
    start = time.perf_counter()
    for i in range(items):
        fn(i)
    return items / (time.perf_counter() - start)


def main() -> int:
    from perception.data.camera_dataset import NuScenesCameraDataset, collate_camera_batch
    from perception.data.datamodule import ensure_label_cache
    from perception.data.label_cache import default_cache_root
    from perception.data.transforms import CameraTransform
    from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes
    from perception.tasks import CAMERA_TASKS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=60)
    parser.add_argument("--step-ms", type=float, help="a device's training-step time to size the loader for")
    parser.add_argument("--step-batch", type=int, default=2, help="images per device step (with --step-ms)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a loader worker runs on one core
    cv2.setNumThreads(1)

    with tempfile.TemporaryDirectory() as root:
        write_synthetic_nuscenes(root, SyntheticSpec(scenes=2, samples_per_scene=6, cameras=1, image_size=(1600, 900),
                                                     val_scenes=1, seed=0))
        infos, directory = ensure_label_cache(root, "v1.0-trainval", "synthetic_train", ["CAM_FRONT"],
                                              default_cache_root(root), 60.0)
        paths = [os.path.join(root, info["image_path"]) for info in infos]
        print(f"{len(paths)} JPEGs at 1600x900 -> {INPUT_SIZE[1]}x{INPUT_SIZE[0]}, {args.items} items per "
              "measurement, 1 thread")

        jitter = A.ColorJitter(brightness=0.25, contrast=0.25, saturation=0.25, hue=0.03, p=1.0)

        def baseline(i: int):
            image = cv2.cvtColor(cv2.imread(paths[i % len(paths)]), cv2.COLOR_BGR2RGB)
            image = cv2.resize(image, (800, 450), interpolation=cv2.INTER_LINEAR)[::-1 if i % 2 else 1]
            return jitter(image=np.ascontiguousarray(image))["image"]

        datasets = {}
        for name, reduced in (("full decode", False), ("half-size decode", True)):
            transform = CameraTransform(INPUT_SIZE, train=True, seed=0)
            datasets[name] = NuScenesCameraDataset(root, infos, directory, transform, seed=0, reduced_decoding=reduced,
                                                   half_decode_max_scale=0.6, tasks=CAMERA_TASKS)  # as in training
        rates = {"baseline (decode + resize + flip + jitter)": rate(baseline, args.items)}
        for name, dataset in datasets.items():
            rates[f"ours, {name}"] = rate(lambda i, d=dataset: d[(0, i % len(d))], args.items)
        # What a worker really does: items and the collate (stacking the uint8 batch), per image.
        half = datasets["half-size decode"]
        batch = 8
        rates["ours, half-size decode + collate"] = batch * rate(
            lambda i: collate_camera_batch([half[(0, (i * batch + j) % len(half))] for j in range(batch)],
                                           CAMERA_TASKS), max(args.items // batch, 1))
        base = rates["baseline (decode + resize + flip + jitter)"]
        for name, value in rates.items():
            print(f"  {name:<45} {value:7.1f} images/s per worker  ({value / base:.2f}x baseline)")
        print_photometric_costs(half[(0, 0)]["image"].permute(1, 2, 0).numpy(), args.items)

        loader_rate = rates["ours, half-size decode + collate"]
        if args.step_ms:
            step_ms, batch, where = args.step_ms, args.step_batch, "the given device step"
        else:
            step_ms, batch, where = measure_demo_step(), 2, "the demo network's CPU training step at 448x800"
        model_rate = batch / step_ms * 1e3
        print(f"training: {where}: {step_ms:.0f} ms per {batch} images = {model_rate:.1f} images/s; "
              f"one worker supplies {loader_rate / model_rate:.2f}x that, so {max(model_rate / loader_rate, 0):.2f} "
              "worker cores keep it fed")
    return 0


def print_photometric_costs(image: np.ndarray, items: int) -> None:
    """ms per image of the photometric step (albumentations as before vs ours) and of normalising a batch."""
    from perception.data.camera_dataset import to_model_input
    from perception.data.photometric import Photometric

    before = A.Compose([A.ColorJitter(brightness=0.25, contrast=0.25, saturation=0.25, hue=0.03, p=0.8),
                        A.GaussNoise(std_range=(0.01, 0.04), p=0.2), A.GaussianBlur(blur_limit=(3, 5), p=0.1)],
                       seed=0)
    ours, rng = Photometric(), np.random.default_rng(0)
    ours.add_noise(image, 1.0, rng)  # its noise bank is made on first use
    costs = {"albumentations (before)": 1e3 / rate(lambda i: before(image=image)["image"], items),
             "ours (one colour matrix)": 1e3 / rate(lambda i: ours(image, rng, bgr=True), items)}
    batch = torch.from_numpy(np.stack([image] * 8)).permute(0, 3, 1, 2)
    costs["to_model_input, per image of a batch of 8"] = 1e3 / rate(lambda i: to_model_input(batch), items) / 8
    print(f"photometric step at {image.shape[1]}x{image.shape[0]}: " +
          ", ".join(f"{name} {ms:.2f} ms" for name, ms in costs.items()))


def measure_demo_step() -> float:
    from perception.build import build_criteria, build_model
    from perception.config import load_config, parse_config
    from perception.losses.task_losses import task_losses

    torch.set_num_threads(max(os.cpu_count() or 1, 1))
    cfg = parse_config(load_config("configs/demo_synthetic.py", {"input_size": list(INPUT_SIZE)}))
    model = build_model(cfg.model, INPUT_SIZE).train()
    criteria = build_criteria(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(2, 3, *INPUT_SIZE)
    targets = random_targets(2, *INPUT_SIZE)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        outputs = model(images)
        loss = sum(task_losses(criteria, outputs, targets, model.heads).values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]) * 1e3)


if __name__ == "__main__":
    sys.exit(main())
