#!/usr/bin/env python
"""GPU figures: camera-network inference in fp32 / fp16 / bf16 at batch 6, the FP16 error of every output,
fp16 replayed from a CUDA graph (and, with --compile, under torch.compile), and one four-task training step in
fp32 vs bf16-mixed.

    python bench/gpu_deployment.py --batch-file batch.pt      # batch.pt: bench/gpu_deployment.py --save-batch

The CUDA graph is captured once from the eval model (static shapes, no host syncs: the same graph the ONNX
export traces) and replayed after copying each batch into its input: kernel launches and Python, which bound
eager inference at these sizes, are gone. Its outputs are compared with eager fp16's.
fp16 here is the whole network in half precision (model.half()), the closest PyTorch stand-in
for a TensorRT FP16 engine: if an output drifts or overflows here, expect the same there. Images
are a real training batch of the demo data (resized to each config's input), not noise.
--save-batch FILE writes that batch from the demo datasets (run it where `make demo-data` ran).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ["configs/swin_deploy_nuscenes_bdd100k.py", "configs/swin_t_nuscenes_bdd100k.py"]
TRAIN_CONFIG = "configs/demo_synthetic.py"


def _cfg(path: str):
    from perception.config import load_config, parse_config

    return parse_config(load_config(os.path.join(ROOT, path)))


def _timed(fn, runs: int, warmup: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2], times[int(0.9 * (len(times) - 1))]


def agreement(reference: dict, outputs: dict) -> str:
    """Drivable logits' max |difference| and, per query head, the share of reference queries found again
    (query_agreement: top-k near-ties may order the queries differently)."""
    from perception.tasks import CAMERA_TASKS

    dense = float((outputs["drivable.logits"].float() - reference["drivable.logits"].float()).abs().max())
    shares = [f"{task.name} {query_agreement(reference, outputs, task.name):.1%}" for task in CAMERA_TASKS
              if task.query_outputs and f"{task.name}.logits" in reference]
    return f"drivable max|diff| {dense:.3g}; queries found again: {', '.join(shares)}"


def query_agreement(reference: dict, outputs: dict, prefix: str) -> float:
    """Share of fp32 queries with an fp16 query of the same box / lane (L1 < 0.01) and logits (< 0.1).

    Query selection is a top-k over per-token scores, so near-ties may pick other tokens or another
    order in fp16; matching by geometry compares what post-processing would see."""
    geometry = "points" if f"{prefix}.points" in reference else "boxes"  # lanes: row x; boxes: cx, cy, w, h
    ref_geo, got_geo = reference[f"{prefix}.{geometry}"].float(), outputs[f"{prefix}.{geometry}"].float()
    ref_logits, got_logits = reference[f"{prefix}.logits"].float(), outputs[f"{prefix}.logits"].float()
    agree = total = 0
    for i in range(len(ref_geo)):
        geo = torch.cdist(ref_geo[i], got_geo[i], p=1) / ref_geo.shape[-1]  # (Q, Q) mean L1
        logit = torch.cdist(ref_logits[i], got_logits[i], p=float("inf"))  # (Q, Q) max |difference|
        best = (geo / 0.01 + logit / 0.1).argmin(dim=1)  # both, in units of their tolerance: duplicates differ
        rows = torch.arange(len(best))
        agree += int(((geo[rows, best] < 0.01) & (logit[rows, best] < 0.1)).sum())
        total += len(best)
    return agree / max(total, 1)


@torch.no_grad()
def inference(config: str, images: torch.Tensor, runs: int, weights: str | None = None, compile: bool = False) -> None:
    from perception.build import build_model

    cfg = _cfg(config)
    torch.manual_seed(0)
    model = build_model(cfg.model, tuple(cfg.input_size))
    if weights:
        model.load_state_dict({k[len("model."):]: v for k, v in
                               torch.load(weights, map_location="cpu", weights_only=True)["state_dict"].items()})
    model = model.cuda().eval()
    batch = torch.nn.functional.interpolate(images, size=tuple(cfg.input_size), mode="bilinear").cuda()
    reference = model(batch)
    p50, p90 = _timed(lambda: model(batch), runs, 5)
    print(f"{config}  {tuple(cfg.input_size)}  batch {len(batch)}  weights {weights or 'random'}")
    print(f"  fp32 (TF32 off)  p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        p50, p90 = _timed(lambda: model(batch), runs, 5)
    print(f"  bf16 autocast    p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms")
    model.half()
    half = batch.half()
    p50, p90 = _timed(lambda: model(half), runs, 5)
    print(f"  fp16 (half)      p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms")
    outputs = model(half)
    try:
        from perception.inference.cuda_graph import capture_cuda_graph

        start = time.perf_counter()
        replay = capture_cuda_graph(model, half)
        capture = time.perf_counter() - start
        p50, p90 = _timed(lambda: replay(half), runs, 5)
        print(f"  fp16 CUDA graph  p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms  (capture {capture:.1f} s)")
        print(f"    against eager fp16: {agreement(outputs, replay(half))}")
    except Exception as error:  # a host sync or dynamic shape in the forward: report it, keep measuring
        print(f"  fp16 CUDA graph  failed: {type(error).__name__}: {error}")
    if compile:
        try:
            compiled = torch.compile(model, mode="reduce-overhead")  # inductor kernels replayed as CUDA graphs
            start = time.perf_counter()
            for _ in range(3):
                compiled(half)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            p50, p90 = _timed(lambda: compiled(half), runs, 5)
            print(f"  fp16 compiled    p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms  (compile {first:.0f} s)")
            print(f"    against eager fp16: {agreement(outputs, compiled(half))}")
        except Exception as error:
            print(f"  fp16 compiled    failed: {type(error).__name__}: {error}")
    finite = all(bool(torch.isfinite(v).all()) for v in outputs.values())
    logits = reference["drivable.logits"]
    dense = float((outputs["drivable.logits"].float() - logits).abs().max())
    flips = float(((outputs["drivable.logits"].float().argmax(1)) != logits.argmax(1)).float().mean())
    print(f"  fp16 vs fp32: all outputs finite {finite}; drivable logits max|diff| {dense:.3g} "
          f"(max|logit| {float(logits.abs().max()):.3g}), drivable pixels flipped {flips:.2%}")
    from perception.tasks import CAMERA_TASKS

    for prefix in (task.name for task in CAMERA_TASKS if task.query_outputs):
        if f"{prefix}.logits" in reference:
            share = query_agreement(reference, outputs, prefix)
            print(f"  fp16 vs fp32: {prefix} queries with a matching fp16 query {share:.1%}")


def training_step(batch: dict, steps: int) -> None:
    from lightning.fabric.utilities.apply_func import move_data_to_device  # what Lightning does to a batch

    from perception.training.assembly import build_system

    cfg = _cfg(TRAIN_CONFIG)
    for precision in ("fp32", "bf16-mixed"):
        torch.manual_seed(0)
        system = build_system(cfg).cuda().train()
        optimizer = torch.optim.AdamW(system.parameters(), lr=1e-4)
        device_batch = move_data_to_device(batch, "cuda")

        def step(system=system, optimizer=optimizer, device_batch=device_batch, bf16=precision != "fp32"):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                total, _, _ = system._losses_and_outputs(device_batch)
            total.backward()
            optimizer.step()
            return total

        first = float(step())
        p50, p90 = _timed(step, steps, 3)
        print(f"train step {TRAIN_CONFIG} batch {len(batch['images'])} {precision:<10} first loss {first:8.4f}  "
              f"p50 {p50 * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms  peak memory "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        torch.cuda.reset_peak_memory_stats()


def save_batch(path: str) -> None:
    """4 nuScenes + 4 BDD100K-format training items: every head has labels in the batch."""
    from perception.build import build_datamodule
    from perception.data.camera_dataset import collate_camera_batch
    from perception.tasks import CAMERA_TASKS

    datamodule = build_datamodule(_cfg(TRAIN_CONFIG))
    nuscenes, bdd = datamodule.dataset("train"), datamodule.bdd100k_dataset("train")
    items = [nuscenes[i] for i in range(0, 40, 10)] + [bdd[i] for i in range(0, 40, 10)]
    batch = collate_camera_batch(items, CAMERA_TASKS)
    batch = {k: v for k, v in batch.items() if k in ("images", "targets")}
    torch.save(batch, path)
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-file", help="training batch written by --save-batch")
    parser.add_argument("--save-batch", help="write a demo training batch here and exit")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--compile", action="store_true",
                        help="also time fp16 inference under torch.compile (mode reduce-overhead; minutes to compile)")
    parser.add_argument("--configs", nargs="+", default=CONFIGS)
    parser.add_argument("--no-train-step", action="store_true", help="skip the demo training step")
    parser.add_argument("--demo-weights", help="trained weights of configs/demo_synthetic.py ({'state_dict': ...})")
    args = parser.parse_args()
    if args.save_batch:
        save_batch(args.save_batch)
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    try:
        import onnxruntime

        print(f"onnxruntime {onnxruntime.__version__} providers {onnxruntime.get_available_providers()}")
    except ImportError:
        print("onnxruntime not installed")
    from perception.data.camera_dataset import to_model_input

    batch = torch.load(args.batch_file, weights_only=False)
    batch_images = to_model_input(batch["images"])
    images = torch.cat([batch_images] * 6)[:6]
    if args.demo_weights:
        inference(TRAIN_CONFIG, batch_images, args.runs, weights=args.demo_weights)
    for config in args.configs:
        inference(config, images, args.runs, compile=args.compile)
    if not args.no_train_step:
        training_step(batch, steps=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
