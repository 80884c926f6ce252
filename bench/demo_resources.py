#!/usr/bin/env python
"""Wall time and peak memory of each phase of `make demo` (or `make demo-motion`), measured from scratch.

    python bench/demo_resources.py [--out /tmp/demo_bench] [--toy] [--motion]

Runs the generator, training and evaluation (with the report) as `make demo` does, into a fresh
folder, sampling the summed RSS of each phase's process tree (workers included) every 0.2 s, then
prints what the README's model-zoo row needs: the checkpoint's SHA-256, the headline metrics and
(camera model) the eager PyTorch latency of one image at batch 1 on this machine's threads.
Budget (issue 2): under 8 GB peak and about 15 minutes in all on a 2-core machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def _tree_rss_bytes(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
        stack += _children(pid)
    return total


def run_phase(name: str, command: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss_bytes(process.pid))
        time.sleep(0.2)
    if process.returncode != 0:
        sys.exit(f"{name} failed:\n{process.stderr.read()[-3000:]}")
    wall = time.perf_counter() - start
    print(f"{name:<10} wall {wall:7.1f} s   peak RSS {peak / 2**30:5.2f} GiB", flush=True)
    return wall, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/perception_demo_bench")
    parser.add_argument("--toy", action="store_true", help="tiny data and 2 training steps (a smoke run)")
    parser.add_argument("--motion", action="store_true", help="the forecasting demo (make demo-motion) instead")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    if args.motion:
        return motion(args)
    data, bdd, work = (os.path.join(args.out, name) for name in ("data", "bdd100k", "work"))
    python = sys.executable
    size = ["--scenes", "3", "--samples-per-scene", "2", "--val-scenes", "1"] if args.toy else \
        ["--scenes", "12", "--samples-per-scene", "16", "--val-scenes", "2"]
    bdd_size = ["--videos", "3", "--frames-per-video", "2", "--val-videos", "1"] if args.toy else \
        ["--videos", "12", "--frames-per-video", "16", "--val-videos", "3"]
    options = [f"data_root={data}", f"bdd100k.data_root={bdd}"]
    if args.toy:
        options += ["trainer.max_steps=2", "heldout_eval_every_n_steps=0", "trainer.val_check_interval=2"]
    phases = [
        ("generate", [python, "tools/make_synthetic_nuscenes.py", data, *size, "--cameras", "6",
                      "--image-size", "640x360", "--seed", "0"]),
        ("bdd100k", [python, "tools/make_synthetic_bdd100k.py", bdd, *bdd_size, "--image-size", "640x360",
                     "--seed", "0"]),
        ("train", [python, "tools/train.py", "configs/demo_synthetic.py", "--work-dir", work,
                   "--cfg-options", *options]),
        ("test", [python, "tools/test.py", "configs/demo_synthetic.py", os.path.join(work, "checkpoints", "last.ckpt"),
                  "--work-dir", work, "--report", "--cfg-options", *options]),
    ]
    run_phases(phases)
    checkpoint = os.path.join(work, "checkpoints", "last.ckpt")
    zoo_figures(checkpoint, work, ("nuscenes/mAP", "nuscenes/NDS", "lanes/F1", "lights/AP50", "drivable/IoU",
                                   "drivable/IoU_bdd100k"))
    print(f"eager latency, batch 1: {eager_latency_ms('configs/demo_synthetic.py', checkpoint):.1f} ms per image "
          f"({os.cpu_count()} cores)")
    return 0


def motion(args) -> int:
    """make demo-motion's phases (no export): synthetic motion tables, training, devkit evaluation."""
    data, work, python = os.path.join(args.out, "data"), os.path.join(args.out, "work"), sys.executable
    size = ["--scenes", "4", "--samples-per-scene", "40", "--val-scenes", "1"] if args.toy else \
        ["--scenes", "16", "--samples-per-scene", "40", "--val-scenes", "4"]
    options = [f"data_root={data}"] + (["trainer.max_steps=2"] if args.toy else [])
    checkpoint = os.path.join(work, "checkpoints", "last.ckpt")
    run_phases([
        ("generate", [python, "tools/make_synthetic_nuscenes.py", data, *size, "--cameras", "0", "--seed", "0"]),
        ("train", [python, "tools/train.py", "configs/motion_synthetic.py", "--work-dir", work, "--cfg-options",
                   *options]),
        ("test", [python, "tools/test.py", "configs/motion_synthetic.py", checkpoint, "--work-dir", work,
                  "--cfg-options", *options]),
    ])
    zoo_figures(checkpoint, work,
                ("motion/minADE_5", "motion/minFDE_5", "motion/MissRate_2_5", "motion_cv/minADE_5"))
    return 0


def run_phases(phases: list) -> None:
    results = [run_phase(name, command) for name, command in phases]
    wall, peak = sum(r[0] for r in results), max(r[1] for r in results)
    print(f"{'total':<10} wall {wall:7.1f} s   peak RSS {peak / 2**30:5.2f} GiB"
          " (install not included)")


def zoo_figures(checkpoint: str, work: str, keys: tuple[str, ...]) -> None:
    digest = hashlib.sha256(open(checkpoint, "rb").read()).hexdigest()
    metrics = json.load(open(os.path.join(work, "metrics.json")))
    print(f"checkpoint {checkpoint}: SHA-256 {digest}")
    print("metrics: " + ", ".join(f"{k} {metrics[k]:.4f}" for k in keys if metrics.get(k) is not None))


def eager_latency_ms(config: str, checkpoint: str, runs: int = 20) -> float:
    """p50 of one image through the trained camera network in eager PyTorch (no post-processing)."""
    import torch

    from perception.config import load_config, parse_config
    from perception.inference.predictors import TorchPredictor

    cfg = parse_config(load_config(config, {}))
    predictor = TorchPredictor(cfg, checkpoint)
    image = torch.randn(1, 3, *cfg.input_size)
    times = []
    for i in range(runs + 3):
        start = time.perf_counter()
        predictor(image)
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - start)
    return 1000.0 * sorted(times)[len(times) // 2]


if __name__ == "__main__":
    sys.exit(main())
