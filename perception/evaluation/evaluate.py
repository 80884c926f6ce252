"""Run a model over a split and score it; metrics come back as a flat dict ``task/metric``.

nuScenes split: drivable area at the original image resolution (``drivable/IoU``), obstacles
as a nuScenes submission JSON scored by the official devkit's DetectionEval (``nuscenes/*``),
map-derived lanes (``lanes/F1_nuscenes``). When the config mixes in BDD100K-format data, its
validation split adds traffic lights (``lights/AP50`` overall and per state, pycocotools), lanes
(``lanes/F1_bdd100k``) and drivable area (``drivable/IoU_bdd100k``). ``lanes/F1`` counts every
lane-labelled image of both. BDD100K's own definitions are reported beside ours: the lane-marking
F-score at 1 / 2 / 5 px (``lanes/F1_pix1_bdd100k`` ...) and the drivable mIoU (``drivable/mIoU_bdd100k``),
see ``perception.metrics.bdd100k``. ``report_dir`` adds the HTML report (``perception.evaluation.report``).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

from perception.build import build_datamodule
from perception.config import ExperimentConfig
from perception.core.progress import progress
from perception.data.camera_dataset import to_model_input
from perception.data.sampling import ResumableSampler
from perception.inference.predictors import ModulePredictor, TorchPredictor
from perception.tasks import ScoringContext


@torch.no_grad()
def evaluate(cfg: ExperimentConfig, checkpoint_path: str, work_dir: str, split: str | None = None,
             batch_size: int | None = None, num_workers: int | None = None, format_only: bool = False,
             results_path: str | None = None, predictor=None, report_dir: str | None = None,
             checkpoint_label: str | None = None) -> dict[str, float]:
    """Metrics on ``split`` (default: the config's val split) and, when configured, BDD100K's val split.

    ``predictor`` (images -> outputs dict) replaces the PyTorch model when given, e.g. an
    ONNX Runtime session wrapper; post-processing and scoring are the same. ``report_dir``: also
    write the HTML evaluation report there (rank 0), naming the model ``checkpoint_label``.

    Under torchrun (a process group, or WORLD_SIZE > 1) every rank evaluates its shard of the
    images; results are gathered per image, which removes the duplicates the sampler pads with,
    and rank 0 writes the JSON and runs the devkit. Every rank returns the same metrics.
    """
    split = split or cfg.val_split
    rank, world = distributed_rank_and_world()
    if predictor is None:
        predictor = TorchPredictor(cfg, checkpoint_path)
    elif isinstance(predictor, torch.nn.Module):  # a model in training, on whatever device it trains on
        predictor = ModulePredictor(predictor)
    datamodule = build_datamodule(cfg)
    sources = [datamodule.dataset("val", split=split)]
    if cfg.bdd100k is not None and any("bdd100k" in task.labelled_datasets for task in cfg.model.heads.enabled):
        sources.append(datamodule.bdd100k_dataset("val"))
    per_image: dict[str, dict] = {}  # image key -> result of that image
    detail = report_dir is not None  # the report's per-frame diagnostics cost a little more per image
    timings = {"model_s": 0.0, "postprocess_s": 0.0, "devkit_s": 0.0}
    for dataset in sources:
        infos = {dataset.image_key(info): info for info in dataset.infos} if detail else {}
        sampler = ResumableSampler(len(dataset), shuffle=False, rank=rank, world_size=world)
        loader = DataLoader(dataset, batch_size=batch_size or cfg.val_batch_size, sampler=sampler,
                            num_workers=cfg.num_workers if num_workers is None else num_workers,
                            collate_fn=datamodule.collate)
        for batch in progress(loader, f"evaluating {dataset.name}", unit="batch"):
            start = time.perf_counter()
            outputs = predictor(to_model_input(batch["images"]))
            timings["model_s"] += time.perf_counter() - start
            start = time.perf_counter()
            for i, meta in enumerate(batch["meta"]):
                per_image[meta["image_key"]] = _image_result(cfg, dataset, outputs, i, meta,
                                                             infos.get(meta["image_key"]))
            timings["postprocess_s"] += time.perf_counter() - start

    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, per_image)
        per_image = {key: result for part in gathered for key, result in part.items()}
        timing_parts: list = [None] * world
        torch.distributed.all_gather_object(timing_parts, timings)
        timings = {k: max(part[k] for part in timing_parts) for k in timings}  # wall time of the slowest rank
    metrics: dict[str, float] = {}
    if rank == 0:
        plot_dir = os.path.join(report_dir, "nuscenes_plots") if detail else None
        metrics = _score(cfg, sources, per_image, split, work_dir, format_only, results_path, timings, plot_dir)
        if detail:
            from perception.evaluation.report import write_report

            metrics["eval/report_s"] = write_report(cfg, sources, per_image, metrics, predictor, report_dir,
                                                    checkpoint_label or str(checkpoint_path))
    if world > 1:
        holder = [metrics]
        torch.distributed.broadcast_object_list(holder, src=0)
        metrics = holder[0]
    return metrics


def _image_result(cfg: ExperimentConfig, dataset, outputs: dict, i: int, meta: dict, info: dict | None = None) -> dict:
    """What scoring needs from one image: each enabled task's part (``Task.image_result``).

    With the image's label-cache ``info`` (report mode) also the report's per-frame diagnostics."""
    result = {"dataset": meta["dataset"], "sample_token": meta["sample_token"]}
    for task in cfg.model.heads.enabled:
        result.update(task.image_result(cfg, dataset, outputs, i, meta, info))
    return result


def _score(cfg: ExperimentConfig, sources: list, per_image: dict[str, dict], split: str, work_dir: str,
           format_only: bool, results_path: str | None, timings: dict[str, float],
           plot_dir: str | None = None) -> dict[str, float]:
    """Metrics from one result per image (rank 0): each enabled task scores the split (``Task.score``)."""
    for dataset in sources:
        expected = {dataset.image_key(info) for info in dataset.infos}
        missing = expected - set(per_image)
        if missing:
            raise RuntimeError(f"evaluation produced no result for {len(missing)} of the {len(expected)} images of "
                               f"{dataset.name} (e.g. {sorted(missing)[:2]})")
    results = [per_image[key] for key in sorted(per_image)]  # a fixed order, whatever the number of ranks
    context = ScoringContext(cfg, sources, split, work_dir, format_only, results_path, plot_dir, timings)
    metrics: dict[str, float] = {}
    for task in cfg.model.heads.enabled:
        metrics.update(task.score(results, context))
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
