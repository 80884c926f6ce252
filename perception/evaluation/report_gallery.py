"""The report's gallery: the best and worst validation frames per task, predictions and ground truth drawn.

Frames are ranked by a per-frame score of their task (``frame_scores``): drivable IoU, obstacle F1
(same class within 2 m in BEV), lane F1 (CULane-style matching), traffic-light F1 (IoU 0.5, same
state). The chosen frames are run through the model again (the same dataset item and decoding as
the evaluation) and drawn by ``perception.drawing``: predictions in their task colours,
ground truth in magenta (``TRUTH_RGB``).
"""

from __future__ import annotations

import os

import cv2
import numpy as np

from perception import drawing
from perception.data.camera_dataset import read_image_rgb, to_model_input
from perception.postprocess.drivable import drivable_probability, to_original_image
from perception.postprocess.lanes import ImageLanes, decode_lanes
from perception.postprocess.lights import decode_lights
from perception.postprocess.obstacles import decode_image
from perception.scoring.frame_scores import REPORT_MIN_SCORE, f1, light_frame_counts, visible_truth_boxes

GALLERY_TASKS = ("obstacles", "lanes", "lights", "drivable")
MAX_WIDTH = 800  # drawn frames are scaled down to this width


def frame_score(task: str, result: dict) -> float | None:
    """The task's per-frame score of one evaluation result; None when the frame says nothing about the task."""
    if task == "drivable" and "drivable" in result:
        tp, fp, fn, _ = result["drivable"]
        return tp / (tp + fp + fn) if tp + fp + fn else None
    if task == "obstacles" and "obstacle_counts" in result:
        return f1(*result["obstacle_counts"])
    if task == "lanes" and "lanes" in result:
        return f1(*result["lanes"])
    if task == "lights" and "lights" in result:
        return f1(*light_frame_counts(result["lights"], result["lights_gt"]))
    return None


def select_frames(per_image: dict[str, dict], task: str, count: int = 3) -> tuple[list, list]:
    """(best, worst): up to ``count`` (image key, score) each, worst not repeating best; ties by key."""
    scored = sorted(((key, s) for key, r in per_image.items() if (s := frame_score(task, r)) is not None),
                    key=lambda item: (-item[1], item[0]))
    best = scored[:count]
    worst = sorted(scored[count:], key=lambda item: (item[1], item[0]))[:count]
    return best, worst


def draw_frame(cfg, dataset, index: int, predictor, tasks: tuple[str, ...] = GALLERY_TASKS) -> np.ndarray:
    """uint8 RGB [H, W(+BEV), 3]: one validation frame with the predictions of ``tasks`` and their ground truth.

    ``predictor`` maps images [1,3,H,W] (CPU) to the outputs dict; only the tasks in its outputs are drawn."""

    item = dataset[index]
    meta, info = item["meta"], dataset.infos[index]
    outputs = predictor(to_model_input(item["image"][None]))
    outputs = {k: v.detach().cpu() for k, v in outputs.items()}
    input_size, post = tuple(cfg.input_size), cfg.postprocess
    image = read_image_rgb(meta["image_path"])
    canvas = image.copy()
    if "drivable" in tasks and "drivable.logits" in outputs:
        probability = drivable_probability(outputs["drivable.logits"], input_size).numpy()[0]
        drawing.draw_drivable(canvas, to_original_image(probability, meta["affine"], meta["orig_size"]))
        truth = dataset.read_drivable_truth(meta)
        if truth is not None:
            drawing.draw_mask_outline(canvas, truth)
    if "lanes" in tasks and "lanes.logits" in outputs and meta["lanes_gt"] is not None:
        truth = meta["lanes_gt"]
        polylines = [np.asarray(p, np.float64) for p in truth["polylines"]]
        drawing.draw_lanes(canvas, ImageLanes(polylines, np.zeros(len(polylines), np.int64), np.ones(len(polylines))),
                           colour=drawing.TRUTH_RGB, width=1)
        drawing.draw_lanes(canvas, decode_lanes(outputs, 0, input_size, meta["affine"], post.lane_score_threshold,
                                                post.lane_visibility_threshold, post.lane_line_fit_px,
                                                post.lane_nms_iou, post.lane_fit_horizon_row, post.lane_row_top))
    if "lights" in tasks and "lights.logits" in outputs and meta["lights_gt"] is not None:
        drawing.draw_boxes_2d(canvas, meta["lights_gt"]["boxes_xyxy"])
        drawing.draw_lights(canvas, decode_lights(outputs, 0, input_size, meta["affine"], post.light_max_per_image,
                                                  post.light_score_threshold, post.light_nms_iou), REPORT_MIN_SCORE)
    if "obstacles" in tasks and "obstacles.logits" in outputs and meta["dataset"] == "nuscenes":
        original_intrinsics = np.linalg.inv(meta["affine"]) @ np.asarray(meta["intrinsics"], np.float64)
        truth_boxes = visible_truth_boxes(info, cfg.min_obstacle_visibility)
        drawing.draw_boxes_3d(canvas, truth_boxes, original_intrinsics, 0.0, colour=drawing.TRUTH_RGB)
        predicted = decode_image(outputs, 0, meta["intrinsics"], input_size, post.obstacle_max_per_image,
                                 post.obstacle_score_threshold, post.obstacle_nms_iou, post.obstacle_depth_confidence)
        drawing.draw_boxes_3d(canvas, predicted, original_intrinsics, REPORT_MIN_SCORE)
        panel = drawing.bev_panel(drawing.camera_bev_entries(predicted, REPORT_MIN_SCORE), canvas.shape[0],
                                  truth=drawing.camera_bev_entries(truth_boxes, 0.0))
        canvas = np.concatenate([canvas, panel], axis=1)
    if canvas.shape[1] > MAX_WIDTH:
        scale = MAX_WIDTH / canvas.shape[1]
        canvas = cv2.resize(canvas, (MAX_WIDTH, round(canvas.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    return canvas


def write_gallery(cfg, sources: list, per_image: dict[str, dict], predictor, directory: str,
                  count: int = 3) -> dict[str, dict[str, list[tuple[str, float, str]]]]:
    """Draw each task's best and worst frames into ``directory``:
    {task: {"best"|"worst": [(image key, score, file name)]}} for the tasks with scored frames."""
    os.makedirs(directory, exist_ok=True)
    where = {dataset.image_key(info): (dataset, i) for dataset in sources for i, info in enumerate(dataset.infos)}
    gallery: dict[str, dict] = {}
    for task in GALLERY_TASKS:
        best, worst = select_frames(per_image, task, count)
        if not best:
            continue
        gallery[task] = {}
        for kind, frames in (("best", best), ("worst", worst)):
            entries = []
            for rank, (key, score) in enumerate(frames):
                dataset, index = where[key]
                name = f"{task}_{kind}_{rank}.jpg"
                drawn = draw_frame(cfg, dataset, index, predictor, (task,))
                cv2.imwrite(os.path.join(directory, name), cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, 88])
                entries.append((key, float(score), name))
            gallery[task][kind] = entries
    return gallery
