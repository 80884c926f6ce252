"""Run a model over a split and score it; metrics come back as a flat dict ``task/metric``.

Drivable area is scored at the original image resolution; obstacles are written as a
nuScenes submission JSON and scored by the official devkit's DetectionEval.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

from perception.build import build_datamodule, build_model
from perception.config import ExperimentConfig
from perception.data.camera_dataset import collate_camera_batch
from perception.data.mask_codec import read_mask
from perception.data.sampling import ResumableSampler
from perception.evaluation.checkpoint import load_model_weights
from perception.evaluation.nuscenes_detection import run_detection_eval, write_submission
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.postprocess.obstacles import decode_image, merge_cameras, to_global


@torch.no_grad()
def evaluate(cfg: ExperimentConfig, checkpoint_path: str, work_dir: str, split: str | None = None,
             batch_size: int | None = None, num_workers: int | None = None, format_only: bool = False,
             results_path: str | None = None, predictor=None) -> dict[str, float]:
    """Metrics on ``split`` (default: the config's val split).

    ``predictor`` (images -> outputs dict) replaces the PyTorch model when given, e.g. an
    ONNX Runtime session wrapper; post-processing and scoring are the same.

    Under torchrun (a process group, or WORLD_SIZE > 1) every rank evaluates its shard of the
    images; results are gathered per camera image (sample_data token), which removes the
    duplicates the sampler pads with, and rank 0 writes the JSON and runs the devkit. Every
    rank returns the same metrics.
    """
    split = split or cfg.val_split
    rank, world = distributed_rank_and_world()
    if predictor is None:
        model = build_model(cfg.model, tuple(cfg.input_size))
        load_model_weights(model, checkpoint_path)
        predictor = model.eval()
    dataset = build_datamodule(cfg).dataset("val", split=split)
    sampler = ResumableSampler(len(dataset), shuffle=False, rank=rank, world_size=world)
    loader = DataLoader(dataset, batch_size=batch_size or cfg.val_batch_size, sampler=sampler,
                        num_workers=cfg.num_workers if num_workers is None else num_workers,
                        collate_fn=collate_camera_batch)
    input_size = tuple(cfg.input_size)
    per_image: dict[str, dict] = {}  # sample_data token -> {sample_token, boxes, drivable counts}
    timings = {"model_s": 0.0, "postprocess_s": 0.0, "devkit_s": 0.0}
    for batch in loader:
        start = time.perf_counter()
        outputs = predictor(batch["images"])
        timings["model_s"] += time.perf_counter() - start
        start = time.perf_counter()
        probability = None
        if "drivable.logits" in outputs:
            probability = drivable_probability(outputs["drivable.logits"], input_size).numpy()
        for i, meta in enumerate(batch["meta"]):
            result = {"sample_token": meta["sample_token"]}
            if probability is not None:
                width, height = meta["orig_size"]
                truth = read_mask(meta["drivable_mask_path"], height, width)
                counts = BinaryIoU()
                counts.update(to_original_image(probability[i], meta["affine"], meta["orig_size"]), truth)
                result["drivable"] = (counts.tp, counts.fp, counts.fn, counts.tn)
            if "obstacles.logits" in outputs:
                boxes = decode_image(outputs, i, meta["intrinsics"], input_size,
                                     cfg.postprocess.obstacle_max_per_image, cfg.postprocess.obstacle_score_threshold)
                result["boxes"] = to_global(boxes, meta["ego_from_camera"], meta["global_from_ego"])
            per_image[meta["sample_data_token"]] = result
        timings["postprocess_s"] += time.perf_counter() - start

    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, per_image)
        per_image = {token: result for part in gathered for token, result in part.items()}
        timing_parts: list = [None] * world
        torch.distributed.all_gather_object(timing_parts, timings)
        timings = {k: max(part[k] for part in timing_parts) for k in timings}  # wall time of the slowest rank
    metrics: dict[str, float] = {}
    if rank == 0:
        metrics = _score(cfg, dataset, per_image, split, work_dir, format_only, results_path, timings)
    if world > 1:
        holder = [metrics]
        torch.distributed.broadcast_object_list(holder, src=0)
        metrics = holder[0]
    return metrics


def _score(cfg: ExperimentConfig, dataset, per_image: dict[str, dict], split: str, work_dir: str, format_only: bool,
           results_path: str | None, timings: dict[str, float]) -> dict[str, float]:
    """Metrics from one result per camera image (rank 0)."""
    expected = {info["sample_data_token"] for info in dataset.infos}
    if set(per_image) != expected:
        raise RuntimeError(f"evaluation produced {len(per_image)} images for the {len(expected)} of split {split}")
    metrics: dict[str, float] = {}
    if cfg.model.heads.drivable is not None:
        iou = BinaryIoU()
        for result in per_image.values():
            tp, fp, fn, tn = result["drivable"]
            iou.tp, iou.fp, iou.fn, iou.tn = iou.tp + tp, iou.fp + fp, iou.fn + fn, iou.tn + tn
        metrics.update({f"drivable/{k}": v for k, v in iou.compute().items()})
    if cfg.model.heads.obstacles is not None:
        start = time.perf_counter()
        per_sample: dict[str, list[dict]] = {}
        for token in sorted(per_image):  # a fixed order, whatever the number of ranks
            per_sample.setdefault(per_image[token]["sample_token"], []).extend(per_image[token]["boxes"])
        sample_tokens = list(dict.fromkeys(info["sample_token"] for info in dataset.infos))
        merged = {token: merge_cameras(boxes) for token, boxes in per_sample.items()}
        results_path = results_path or os.path.join(work_dir, f"results_nusc_{split}.json")
        write_submission(merged, sample_tokens, results_path)
        timings["postprocess_s"] += time.perf_counter() - start
        if not format_only:
            start = time.perf_counter()
            metrics.update(score_detections(cfg, results_path, split, work_dir))
            timings["devkit_s"] += time.perf_counter() - start
    metrics["eval/num_images"] = float(len(per_image))
    metrics.update({f"eval/{k}": v for k, v in timings.items()})
    return metrics


def distributed_rank_and_world() -> tuple[int, int]:
    """(rank, world size); joins the torchrun process group when launched by torchrun."""
    import torch.distributed as dist

    if not dist.is_available():
        return 0, 1
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def score_detections(cfg: ExperimentConfig, results_path: str, split: str, work_dir: str) -> dict[str, float]:
    from perception.data.tables import load_nuscenes

    nusc = load_nuscenes(cfg.data_root, cfg.version)
    output_dir = os.path.join(work_dir, f"nuscenes_eval_{split}")
    os.makedirs(output_dir, exist_ok=True)
    return run_detection_eval(nusc, results_path, split, output_dir)


def write_metrics(metrics: dict[str, float], work_dir: str) -> str:
    os.makedirs(work_dir, exist_ok=True)
    path = os.path.join(work_dir, "metrics.json")
    with open(path, "w") as f:
        json.dump({k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in metrics.items()}, f, indent=2,
                  sort_keys=True)
    return path


def format_table(metrics: dict[str, float]) -> str:
    width = max(len(k) for k in metrics)
    return "\n".join(f"{k:<{width}}  {v:.4f}" for k, v in sorted(metrics.items()))
