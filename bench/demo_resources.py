#!/usr/bin/env python
"""Wall time and peak memory of each phase of `make demo`, measured from scratch.

    python bench/demo_resources.py [--out /tmp/demo_bench] [--toy]

Runs the generator, training and evaluation as `make demo` does, into a fresh folder,
sampling the summed RSS of each phase's process tree (workers included) every 0.2 s.
Budget (issue 2): under 8 GB peak and about 15 minutes in all on a 2-core machine.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
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
                  "--work-dir", work, "--cfg-options", *options]),
    ]
    results = [run_phase(name, command) for name, command in phases]
    wall, peak = sum(r[0] for r in results), max(r[1] for r in results)
    print(f"{'total':<10} wall {wall:7.1f} s   peak RSS {peak / 2**30:5.2f} GiB"
          " (install not included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
