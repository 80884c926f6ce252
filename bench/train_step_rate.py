#!/usr/bin/env python
"""Training-step rate and FLOPs of the demo config and the real Swin-T config.

    python bench/train_step_rate.py                       # CPU, batch 1, both configs
    python bench/train_step_rate.py --device cuda --batch-size 2 --precision bf16 --configs configs/swin_t_nuscenes.py
    python bench/train_step_rate.py --configs configs/demo_synthetic.py --batch-size 8 --compile-backbone
    python bench/train_step_rate.py --configs configs/demo_synthetic.py --batch-size 8 --precision fp32 bf16
    python bench/train_step_rate.py --configs configs/demo_synthetic.py --batch-size 8 --mixed
    python bench/train_step_rate.py --configs configs/demo_synthetic.py --batch-size 8 --mixed --parts
    python bench/train_step_rate.py --device cuda --batch-size 32 --precision bf16 --breakdown \
        --configs configs/swin_t_nuscenes_bdd100k.py

Prints per config: forward GFLOPs (2 x MAC) split into backbone and neck + heads, median
training-step time (forward + backward + AdamW), steps/s, images/s, and on CUDA the peak
memory (on the CPU, the process's peak RSS). The step rate of the first config at the first precision is
the baseline the others are compared with (same run: these machines are noisy). Several ``--precision``
values time each config under each, from the same initial weights: bf16 is autocast (the master weights
stay fp32), on the CPU as on CUDA; a CPU with AVX512-BF16 or AMX runs its matmuls in bf16 natively.
``--mixed`` labels the batch like the demo's mix of datasets (each task on a share of the images) and times
each head run on its labelled images only, as training runs, against every head on every image.
``--breakdown`` also times each part of the step on its own (a device sync between parts): the forward, each
task's criterion with its Hungarian matching apart (host-side), the backward and the optimizer, as median ms and
share of the step. That says whether a GPU waits on the matching.
``--parts`` times each network part's forward and backward in the step (backbone, neck, each head with its
criterion, optimizer): which part a speed change should go after.
``--compile-backbone`` also times each config with its backbone under ``torch.compile`` (inductor), from the
same initial weights, at the last precision given: the one-off compile and the step ratio to eager. On the
2-core CPU it was no gain (2026-12-02, see the README); it is here for the GPU, where fused kernels and fewer
launches are what compile is for.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from random_targets import (  # bench/random_targets.py: this script's folder is on sys.path
    DEMO_LABELLED_SHARE,
    random_targets,
)
from torch.utils.flop_counter import FlopCounterMode


def count_flops(model, images) -> dict[str, float]:
    """Forward GFLOPs (2 x MAC) of the whole network and of the backbone alone."""
    with torch.no_grad():
        with FlopCounterMode(display=False) as total:
            model(images)
        with FlopCounterMode(display=False) as backbone:
            model.backbone(images)
    return {"total": total.get_total_flops() / 1e9, "backbone": backbone.get_total_flops() / 1e9}


def step_times(model, criteria, images, steps: int, warmup: int, device: str, dtype,
               labelled_share: dict | None = None, heads_on_labelled: bool = False) -> list[float]:
    """Seconds per training step with the real criteria on random full-resolution targets, warmup steps
    included (the first one holds the compile when the backbone is compiled). ``labelled_share``: a mixed
    batch (random_targets); ``heads_on_labelled``: each head runs on its labelled images only, as training does."""
    from perception.losses.task_losses import task_losses

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, _, height, width = images.shape
    targets = random_targets(batch, height, width, device, labelled_share)
    labelled = {task: targets[task]["valid"] for task in model.heads} if heads_on_labelled else None
    times = []
    for _ in range(warmup + steps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            outputs = model(images, labelled=labelled)
            loss = sum(task_losses(criteria, outputs, targets, model.heads).values())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def optimizer_step_seconds(optimizer, device: str) -> float:
    """One AdamW step and zeroing of the gradients, timed with a device sync."""
    begin = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - begin


def record(parts: dict[str, list[float]], times: dict[str, float]) -> None:
    """Append one step's seconds per part to ``parts`` as milliseconds."""
    for name, seconds in times.items():
        parts.setdefault(name, []).append(seconds * 1e3)


def step_breakdown(model, criteria, images, steps: int, warmup: int, device: str, dtype) -> dict[str, float]:
    """Median ms of each part of a training step, timed with a device sync around each part: ``forward``,
    ``loss <task>`` (its criterion, matching included), ``match <task>`` (its matchers' calls alone: cost
    matrices, the host transfer and the assignment), ``backward``, ``optimizer``, and ``step`` (their sum)."""
    from perception.losses.task_losses import task_losses

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, _, height, width = images.shape
    targets = random_targets(batch, height, width, device)
    matching: dict[str, float] = {}
    hooks = []

    def time_matcher(task: str, module) -> None:  # hooks: the matcher's own time, synced at both ends
        started = []

        def before(*_):
            _sync(device)
            started.append(time.perf_counter())

        def after(*_):
            _sync(device)
            matching[task] = matching.get(task, 0.0) + time.perf_counter() - started.pop()

        hooks.extend([module.register_forward_pre_hook(before), module.register_forward_hook(after)])

    for task, criterion in criteria.items():
        for module in criterion.modules():
            if type(module).__name__.endswith("Matcher"):
                time_matcher(task, module)
    parts: dict[str, list[float]] = {}
    try:
        for step in range(warmup + steps):
            matching.clear()
            times: dict[str, float] = {}
            _sync(device)
            start = time.perf_counter()
            with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
                outputs = model(images)
                _sync(device)
                times["forward"] = time.perf_counter() - start
                losses = {}
                for task in criteria:
                    begin = time.perf_counter()
                    losses.update(task_losses({task: criteria[task]}, outputs, targets, model.heads))
                    _sync(device)
                    times[f"loss {task}"] = time.perf_counter() - begin
            begin = time.perf_counter()
            sum(losses.values()).backward()
            _sync(device)
            times["backward"] = time.perf_counter() - begin
            times["optimizer"] = optimizer_step_seconds(optimizer, device)
            times["step"] = time.perf_counter() - start
            times.update({f"match {task}": seconds for task, seconds in matching.items()})
            if step >= warmup:
                record(parts, times)
    finally:  # the hooks' syncs must not reach the runs and profiles that follow on the same criteria
        for hook in hooks:
            hook.remove()
    return {name: statistics.median(values) for name, values in parts.items()}


def step_parts(model, criteria, images, steps: int, warmup: int, device: str, dtype,
               labelled_share: dict | None = None) -> dict[str, float]:
    """Median ms of each network part in a training step, its forward and backward together: ``backbone``, ``neck``,
    ``head <task>`` (forward on its labelled images with ``labelled_share``, as training runs; its criterion with the
    matching; its backward down to the FPN levels, or to the backbone's features through a neck of its own),
    ``optimizer``, and ``step`` (their sum). The graph is cut at the neck's input and output (detached leaves), so
    each head's backward stops at the levels it reads and the trunk's backward runs once on the summed gradient, as
    in the joint step; each head runs through
    ``PerceptionModel.head_outputs``, as in ``forward`` (trunk gradient scale, denoising queries, labelled images)."""
    from perception.losses.task_losses import task_losses

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, _, height, width = images.shape
    targets = random_targets(batch, height, width, device, labelled_share)
    autocast = dict(device_type=device, dtype=dtype, enabled=dtype is not None)
    parts: dict[str, list[float]] = {}
    for step in range(warmup + steps):
        times: dict[str, float] = {}
        _sync(device)
        start = time.perf_counter()
        with torch.autocast(**autocast):
            features = model.backbone(images)
        _sync(device)
        times["backbone"] = time.perf_counter() - start
        begin = time.perf_counter()
        features_cut = [f.detach().requires_grad_() for f in features]
        with torch.autocast(**autocast):
            levels = model.neck(features_cut)
        levels_cut = [level.detach().requires_grad_() for level in levels]
        _sync(device)
        times["neck"] = time.perf_counter() - begin
        denoising = {task: criteria[task].denoising_targets(targets, images.device) for task in model.denoising_tasks}
        labelled = ({task: targets[task]["valid"] for task in model.heads} if labelled_share is not None else None)
        for task in model.heads:
            begin = time.perf_counter()
            with torch.autocast(**autocast):
                outputs = model.head_outputs(task, levels_cut, denoising or None, labelled, features_cut)
                loss = sum(task_losses({task: criteria[task]}, outputs, targets, model.heads).values())
            loss.backward()
            _sync(device)
            times[f"head {task}"] = time.perf_counter() - begin
        begin = time.perf_counter()
        reached = [(level, cut.grad) for level, cut in zip(levels, levels_cut) if cut.grad is not None]
        torch.autograd.backward(*zip(*reached))  # a level no head reads has no gradient
        _sync(device)
        times["neck"] += time.perf_counter() - begin
        begin = time.perf_counter()
        reached = [(f, cut.grad) for f, cut in zip(features, features_cut) if cut.grad is not None]
        torch.autograd.backward(*zip(*reached))
        _sync(device)
        times["backbone"] += time.perf_counter() - begin
        times["optimizer"] = optimizer_step_seconds(optimizer, device)
        times["step"] = time.perf_counter() - start
        if step >= warmup:
            record(parts, times)
    return {name: statistics.median(values) for name, values in parts.items()}


def profile_losses(model, criteria, images, device: str, dtype, top: int) -> None:
    """One step's criteria under cProfile (host time; on CUDA, waits for the device show up in the calls that
    copy to the host) and, on CUDA, the number of host-device syncs they make: what keeps the GPU waiting."""
    import cProfile
    import pstats
    import warnings

    from perception.losses.task_losses import task_losses

    batch, _, height, width = images.shape
    targets = random_targets(batch, height, width, device)
    with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
        outputs = model(images)
        _sync(device)
        profiler = cProfile.Profile()
        with warnings.catch_warnings(record=True) as syncs:
            warnings.simplefilter("always")
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            profiler.enable()
            task_losses(criteria, outputs, targets, model.heads)
            _sync(device)
            profiler.disable()
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
    if device == "cuda":
        print(f"  criteria: {sum('synchroniz' in str(w.message) for w in syncs)} host-device syncs in one step")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)


def profile_step(model, criteria, images, device: str, dtype, top: int) -> None:
    """One training step under torch.profiler: the ``top`` operators by self time on the device (CUDA) or the
    CPU, the table that says which kernels to make cheaper."""
    from torch.profiler import ProfilerActivity, profile

    from perception.losses.task_losses import task_losses

    batch, _, height, width = images.shape
    targets = random_targets(batch, height, width, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as profiler:
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            outputs = model(images)
            loss = sum(task_losses(criteria, outputs, targets, model.heads).values())
        loss.backward()
        _sync(device)
    model.zero_grad(set_to_none=True)
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(profiler.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=60), flush=True)


def print_breakdown(parts: dict[str, float], batch: int, title: str = "breakdown") -> None:
    step = parts["step"]
    line = "  ".join(f"{name} {ms:.1f} ({ms / step:.0%})" for name, ms in parts.items() if name != "step")
    print(f"  {title}, ms (share of the step {step:.1f} ms = {batch / step * 1e3:.1f} img/s): {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["configs/demo_synthetic.py", "configs/swin_t_nuscenes.py"])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=("fp32", "bf16"),
                        help="one or more; each config is timed under each, in this order")
    parser.add_argument("--compile-backbone", action="store_true",
                        help="also time each config with its backbone under torch.compile")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time each part of the step alone: forward, each criterion and its matching, "
                             "backward, optimizer")
    parser.add_argument("--parts", action="store_true",
                        help="also time each network part's forward + backward in the step: backbone, neck, each head "
                             "with its criterion (on its labelled images with --mixed), optimizer")
    parser.add_argument("--profile-losses", type=int, default=0, metavar="N",
                        help="with --breakdown: also print the N functions with the most host time in one step's "
                             "criteria (cProfile) and, on CUDA, the number of host-device syncs they make")
    parser.add_argument("--profile-step", type=int, default=0, metavar="N",
                        help="with --breakdown: also print the N operators with the most self time in one step "
                             "(torch.profiler; device time on CUDA)")
    parser.add_argument("--mixed", action="store_true",
                        help="batches labelled like the demo's mix (random_targets.DEMO_LABELLED_SHARE); also time "
                             "every head on every image against each head on its labelled images (as training runs)")
    args = parser.parse_args()

    from perception.build import build_criteria, build_model
    from perception.config import load_config, parse_config

    print(f"device={args.device} batch={args.batch_size} precision={' '.join(args.precision)} "
          f"threads={torch.get_num_threads()}"
          f" torch={torch.__version__}")
    baseline = None
    for path in args.configs:
        cfg = parse_config(load_config(path))
        height, width = cfg.input_size
        model = build_model(cfg.model, (height, width)).to(args.device).train()
        images = torch.randn(args.batch_size, 3, height, width, device=args.device)
        flops = count_flops(model.eval(), images[:1])
        model.train()
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        criteria = build_criteria(cfg)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        print(f"{os.path.basename(path):<24} {height}x{width}  GFLOPs/img {flops['total']:7.2f} "
              f"(backbone {flops['backbone']:6.2f}, neck+heads {flops['total'] - flops['backbone']:6.2f} = "
              f"{(flops['total'] - flops['backbone']) / flops['total']:.0%})", flush=True)
        share = DEMO_LABELLED_SHARE if args.mixed else None
        for precision in args.precision:
            model.load_state_dict(initial)  # every precision starts from the same weights
            dtype = torch.bfloat16 if precision == "bf16" else None
            times = step_times(model, criteria, images, args.steps, args.warmup, args.device, dtype, share,
                               heads_on_labelled=args.mixed)[args.warmup:]
            median = statistics.median(times)
            baseline = baseline or median
            line = (f"  {precision:<6} step {median * 1e3:8.1f} ms  {1 / median:6.2f} steps/s  "
                    f"{args.batch_size / median:6.2f} img/s  x{median / baseline:5.2f} vs first")
            if args.device == "cuda":
                line += f"  peak mem {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
            else:  # process peak RSS; it only grows, so list configs from small to large
                line += f"  peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"
            print(line, flush=True)
            if args.breakdown:
                model.load_state_dict(initial)
                print_breakdown(step_breakdown(model, criteria, images, args.steps, args.warmup, args.device, dtype),
                                args.batch_size)
                if args.profile_losses:
                    profile_losses(model, criteria, images, args.device, dtype, args.profile_losses)
                if args.profile_step:
                    profile_step(model, criteria, images, args.device, dtype, args.profile_step)
            if args.parts:
                model.load_state_dict(initial)
                print_breakdown(step_parts(model, criteria, images, args.steps, args.warmup, args.device, dtype, share),
                                args.batch_size, title="parts (forward + backward)")
            if args.mixed:  # the baseline: every head on every image (the unlabelled rows' outputs are unused)
                model.load_state_dict(initial)
                every = statistics.median(step_times(model, criteria, images, args.steps, args.warmup, args.device,
                                                     dtype, share)[args.warmup:])
                print(f"  {precision:<6} every head on every image: step {every * 1e3:8.1f} ms  "
                      f"heads on their labelled images x{median / every:5.2f} of it", flush=True)
        if args.compile_backbone:  # eager's step and dtype: the last precision's, from the loop above
            model.load_state_dict(initial)
            model.backbone = torch.compile(model.backbone)
            times = step_times(model, criteria, images, args.steps, args.warmup, args.device, dtype)
            compiled = statistics.median(times[args.warmup:])
            print(f"{'  backbone compiled':<24} first step (compile) {times[0]:6.1f} s  step {compiled * 1e3:8.1f} ms  "
                  f"{args.batch_size / compiled:6.2f} img/s  x{compiled / median:5.2f} vs eager", flush=True)
        del model, images
    return 0


if __name__ == "__main__":
    sys.exit(main())
