#!/usr/bin/env python
"""Cost of each part of the network at the deployment resolution: FLOPs and CPU latency.

    python bench/network_cost.py                                    # Swin-T config, 6 cameras
    python bench/network_cost.py --config configs/demo_synthetic.py --batch 6

For a batch of six camera images (one nuScenes sample) in eval mode: forward GFLOPs
(2 x MAC) and median latency of the backbone, the neck and each head, and the share of the
neck + heads in the whole network (budget: at most about a third; the backbone should dominate).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch.utils.flop_counter import FlopCounterMode


def _measure(fn, runs: int) -> tuple[float, float]:
    """(GFLOPs, median seconds) of fn()."""
    with FlopCounterMode(display=False) as counter:
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return counter.get_total_flops() / 1e9, statistics.median(times)


@torch.no_grad()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/swin_t_nuscenes.py")
    parser.add_argument("--batch", type=int, default=6, help="images per forward (6 = one nuScenes sample)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from perception.build import build_model
    from perception.config import load_config, parse_config

    cfg = parse_config(load_config(args.config))
    height, width = cfg.input_size
    model = build_model(cfg.model, (height, width)).eval()
    images = torch.randn(args.batch, 3, height, width)
    model(images)  # warm-up
    features = model.backbone(images)
    levels = model.neck(features)
    rows = [("backbone", *_measure(lambda: model.backbone(images), args.runs)),
            ("neck (FPN)", *_measure(lambda: model.neck(features), args.runs))]
    for name in model.heads:  # a head with a neck of its own (model.own_necks) is measured with it
        label = f"head: {name}" + (" + neck" if name in model.own_necks else "")
        rows.append((label, *_measure(lambda name=name: model.head_outputs(name, levels, features=features),
                                      args.runs)))
    total_flops, total_time = _measure(lambda: model(images), args.runs)
    print(f"{args.config}  input {height}x{width}  batch {args.batch}  threads {torch.get_num_threads()}")
    print(f"{'part':<18}{'GFLOPs':>10}{'share':>8}{'latency ms':>12}")
    for name, flops, seconds in rows:
        print(f"{name:<18}{flops:>10.1f}{flops / total_flops:>8.1%}{seconds * 1e3:>12.1f}")
    print(f"{'whole network':<18}{total_flops:>10.1f}{1:>8.0%}{total_time * 1e3:>12.1f}")
    others = total_flops - rows[0][1]
    print(f"neck + heads: {others / total_flops:.1%} of the network's FLOPs (budget <= ~33%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
