#!/usr/bin/env python
"""Trajectory forecaster: inference latency (PyTorch eager vs ONNX Runtime) and training-step cost.

    python bench/forecast_latency.py [--config configs/motion_synthetic.py] [--batches 1 16 64 256]

Random weights (latency does not depend on them). Per batch of agents: p50 / p90 latency of the
full autoregressive forecast (encoder + 12 decoder steps, K modes) in PyTorch eager and in ONNX
Runtime (the exported graph, same run, same threads), the ratio ORT / eager and agents/s.
Then the training step (forward + backward + AdamW) with teacher forcing only and with the
self-fed pass on the model's own rollout, so its cost is a ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def percentiles(fn, repeats: int, warmup: int = 3) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times) * 1e3, times[int(0.9 * (len(times) - 1))] * 1e3


def main() -> int:
    import onnxruntime as ort

    from perception.build import build_motion_model
    from perception.config import load_config, parse_config
    from perception.export.motion_onnx import INPUT_NAMES, OUTPUT_NAMES, example_inputs, export_forecaster
    from perception.losses.motion_loss import MotionCriterion

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/motion_synthetic.py")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg = parse_config(load_config(args.config))
    model = build_motion_model(cfg).eval()
    lanes = cfg.data.max_lanes
    print(f"config {args.config}: dim {cfg.model.dim}, {cfg.model.encoder_layers}+{cfg.model.decoder_layers} layers, "
          f"{cfg.model.num_modes} modes, {model.future_steps} steps, {lanes} lane tokens; "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters; {args.threads} threads")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "forecaster.onnx")
        export_forecaster(model, path, lanes)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        print(f"{'agents':>7} {'eager p50':>10} {'eager p90':>10} {'ORT p50':>9} {'ORT p90':>9} {'ORT/eager':>10} "
              f"{'agents/s ORT':>13}")
        for batch in args.batches:
            inputs = example_inputs(model, batch, lanes, seed=batch)
            feed = {n: t.numpy() for n, t in zip(INPUT_NAMES, inputs)}
            with torch.no_grad():
                eager = percentiles(lambda inputs=inputs: model.forecast(*inputs), args.repeats)
            onnx = percentiles(lambda feed=feed: session.run(list(OUTPUT_NAMES), feed), args.repeats)
            print(f"{batch:>7} {eager[0]:>8.2f}ms {eager[1]:>8.2f}ms {onnx[0]:>7.2f}ms {onnx[1]:>7.2f}ms "
                  f"{onnx[0] / eager[0]:>10.2f} {batch / onnx[0] * 1e3:>13.0f}")

    model.train()
    batch = cfg.batch_size
    inputs = example_inputs(model, batch, lanes, seed=0)
    future = torch.cumsum(torch.rand(batch, model.future_steps, 2), dim=1) * 3
    valid = torch.ones(batch, model.future_steps)
    criterion = MotionCriterion()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(self_fed: bool):
        losses = criterion(model, inputs, future, valid, self_fed=self_fed)
        optimizer.zero_grad()
        sum(losses.values()).backward()
        optimizer.step()

    teacher = percentiles(lambda: step(False), max(args.repeats // 2, 5))[0]
    self_fed = percentiles(lambda: step(True), max(args.repeats // 2, 5))[0]
    print(f"training step, batch {batch}: teacher forcing only {teacher:.1f} ms, with the self-fed pass "
          f"{self_fed:.1f} ms ({self_fed / teacher:.2f}x)")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
