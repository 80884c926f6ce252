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
from perception.core.light_states import LIGHT_STATES
from perception.core.progress import progress
from perception.data.camera_dataset import collate_camera_batch
from perception.data.sampling import ResumableSampler
from perception.evaluation.frame_scores import lane_sweep_entry, obstacle_frame_counts, visible_truth_boxes
from perception.evaluation.nuscenes_detection import run_detection_eval, write_submission
from perception.inference.predictors import TorchPredictor
from perception.metrics.bdd100k import lane_fscores, mean_lane_fscores
from perception.metrics.box_ap import coco_ap50
from perception.metrics.lanes import LaneF1, match_lanes
from perception.metrics.segmentation import BinaryIoU
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.postprocess.lanes import decode_lanes
from perception.postprocess.lights import decode_lights
from perception.postprocess.obstacles import decode_image, merge_cameras, to_global


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
    datamodule = build_datamodule(cfg)
    sources = [datamodule.dataset("val", split=split)]
    heads = cfg.model.heads
    if cfg.bdd100k is not None and any(h is not None for h in (heads.drivable, heads.lanes, heads.lights)):
        sources.append(datamodule.bdd100k_dataset("val"))
    per_image: dict[str, dict] = {}  # image key -> result of that image
    detail = report_dir is not None  # the report's per-frame diagnostics cost a little more per image
    timings = {"model_s": 0.0, "postprocess_s": 0.0, "devkit_s": 0.0}
    for dataset in sources:
        infos = {dataset.image_key(info): info for info in dataset.infos} if detail else {}
        sampler = ResumableSampler(len(dataset), shuffle=False, rank=rank, world_size=world)
        loader = DataLoader(dataset, batch_size=batch_size or cfg.val_batch_size, sampler=sampler,
                            num_workers=cfg.num_workers if num_workers is None else num_workers,
                            collate_fn=collate_camera_batch)
        for batch in progress(loader, f"evaluating {dataset.name}", unit="batch"):
            start = time.perf_counter()
            outputs = predictor(batch["images"])
            timings["model_s"] += time.perf_counter() - start
            start = time.perf_counter()
            probability = None
            if "drivable.logits" in outputs:
                probability = drivable_probability(outputs["drivable.logits"], tuple(cfg.input_size)).numpy()
            for i, meta in enumerate(batch["meta"]):
                per_image[meta["image_key"]] = _image_result(cfg, dataset, outputs, probability, i, meta,
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


def _image_result(cfg: ExperimentConfig, dataset, outputs: dict, probability, i: int, meta: dict,
                  info: dict | None = None) -> dict:
    """What scoring needs from one image: drivable counts, boxes, lane matches, light detections.

    With the image's label-cache ``info`` (report mode) also the report's per-frame diagnostics."""
    input_size, post = tuple(cfg.input_size), cfg.postprocess
    result = {"dataset": meta["dataset"], "sample_token": meta["sample_token"]}
    if probability is not None:
        truth = dataset.read_drivable_truth(meta)
        if truth is not None:
            counts = BinaryIoU()
            counts.update(to_original_image(probability[i], meta["affine"], meta["orig_size"]), truth)
            result["drivable"] = (counts.tp, counts.fp, counts.fn, counts.tn)
    if "obstacles.logits" in outputs and meta["dataset"] == "nuscenes":
        boxes = decode_image(outputs, i, meta["intrinsics"], input_size, post.obstacle_max_per_image,
                             post.obstacle_score_threshold)
        result["boxes"] = to_global(boxes, meta["ego_from_camera"], meta["global_from_ego"])
        if info is not None:
            truth = visible_truth_boxes(info, cfg.min_obstacle_visibility)
            result["obstacle_counts"] = obstacle_frame_counts(boxes, truth)
    if "lanes.logits" in outputs and meta["lanes_gt"] is not None:
        lanes = decode_lanes(outputs, i, input_size, meta["affine"], post.lane_score_threshold,
                             post.lane_visibility_threshold)
        truth = [np.asarray(p, np.float64) for p in meta["lanes_gt"]["polylines"]]
        result["lanes"] = match_lanes(lanes.polylines, truth, meta["orig_size"])
        if meta["dataset"] == "bdd100k":
            result["lanes_bdd"] = lane_fscores(lanes.polylines, truth, meta["orig_size"])
        if info is not None:  # every lane above a low score, for the precision/recall sweep
            low = decode_lanes(outputs, i, input_size, meta["affine"], 0.05, post.lane_visibility_threshold)
            result["lane_sweep"] = lane_sweep_entry(low.polylines, low.scores, truth, meta["orig_size"])
    if "lights.logits" in outputs and meta["lights_gt"] is not None:
        result["lights"] = decode_lights(outputs, i, input_size, meta["affine"], post.light_max_per_image,
                                         post.light_score_threshold)
        result["lights_gt"] = meta["lights_gt"]
    return result


def _score(cfg: ExperimentConfig, sources: list, per_image: dict[str, dict], split: str, work_dir: str,
           format_only: bool, results_path: str | None, timings: dict[str, float],
           plot_dir: str | None = None) -> dict[str, float]:
    """Metrics from one result per image (rank 0)."""
    for dataset in sources:
        expected = {dataset.image_key(info) for info in dataset.infos}
        missing = expected - set(per_image)
        if missing:
            raise RuntimeError(f"evaluation produced no result for {len(missing)} of the {len(expected)} images of "
                               f"{dataset.name} (e.g. {sorted(missing)[:2]})")
    metrics: dict[str, float] = {}
    suffix = {"nuscenes": "", "bdd100k": "_bdd100k"}
    for name in ("nuscenes", "bdd100k"):
        counts = [r["drivable"] for r in per_image.values() if r["dataset"] == name and "drivable" in r]
        if counts:
            iou = BinaryIoU()
            iou.tp, iou.fp, iou.fn, iou.tn = (int(sum(c[k] for c in counts)) for k in range(4))
            metrics.update({f"drivable/{k}{suffix[name]}": v for k, v in iou.compute().items()})
    lane_results = {name: [r["lanes"] for r in per_image.values() if r["dataset"] == name and "lanes" in r]
                    for name in ("nuscenes", "bdd100k")}
    if any(lane_results.values()):
        overall = LaneF1()
        for name, results in lane_results.items():
            if not results:
                continue
            per_dataset = LaneF1()
            for tp, fp, fn in results:
                per_dataset.add(tp, fp, fn)
                overall.add(tp, fp, fn)
            metrics[f"lanes/F1_{name}"] = per_dataset.compute()["F1"]
        metrics.update({f"lanes/{k}": v for k, v in overall.compute().items()})
    official = [r["lanes_bdd"] for r in per_image.values() if "lanes_bdd" in r]
    if official:
        metrics.update({f"lanes/{k}_bdd100k": v for k, v in mean_lane_fscores(official).items()})
    light_results = [per_image[key] for key in sorted(per_image) if "lights" in per_image[key]]
    if light_results:
        ap = coco_ap50([r["lights_gt"] for r in light_results], [r["lights"] for r in light_results], LIGHT_STATES)
        metrics.update({f"lights/{k}": v for k, v in ap.items()})
    if cfg.model.heads.obstacles is not None:
        start = time.perf_counter()
        per_sample: dict[str, list[dict]] = {}
        for key in sorted(per_image):  # a fixed order, whatever the number of ranks
            if "boxes" in per_image[key]:
                per_sample.setdefault(per_image[key]["sample_token"], []).extend(per_image[key]["boxes"])
        sample_tokens = list(dict.fromkeys(info["sample_token"] for info in sources[0].infos))
        merged = {token: merge_cameras(boxes) for token, boxes in per_sample.items()}
        results_path = results_path or os.path.join(work_dir, f"results_nusc_{split}.json")
        write_submission(merged, sample_tokens, results_path)
        timings["postprocess_s"] += time.perf_counter() - start
        if not format_only:
            start = time.perf_counter()
            metrics.update(score_detections(cfg, results_path, split, work_dir, plot_dir))
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


def score_detections(cfg: ExperimentConfig, results_path: str, split: str, work_dir: str,
                     plot_dir: str | None = None) -> dict[str, float]:
    from perception.data.tables import load_nuscenes

    nusc = load_nuscenes(cfg.data_root, cfg.version)
    output_dir = os.path.join(work_dir, f"nuscenes_eval_{split}")
    os.makedirs(output_dir, exist_ok=True)
    return run_detection_eval(nusc, results_path, split, output_dir, plot_dir=plot_dir)


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
