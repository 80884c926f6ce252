"""The evaluation report: ``<work_dir>/report/index.html``, one page with its images beside it.

Sections: what was evaluated (model, config hash, checkpoint and its SHA-256, date, split);
the metrics per task and dataset; obstacles (the devkit's own curves, AP by distance band and by
class); lanes (precision/recall over the score threshold, BDD100K's F-scores); traffic lights
(precision/recall per state from pycocotools, the state confusion matrix); a gallery of the best
and worst frames per task. A section whose task is not in the model says so instead of staying
empty. ``tools/test.py --report`` and ``make demo`` write it.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import html
import json
import os
import time

import numpy as np

from perception.core.light_states import LIGHT_STATES
from perception.core.nuscenes_constants import DETECTION_CLASSES
from perception.evaluation.report_gallery import write_gallery
from perception.evaluation.report_plots import bar_plot, confusion_plot, precision_recall_plot
from perception.metrics.box_ap import coco_precision50
from perception.scoring.frame_scores import REPORT_MIN_SCORE, lane_precision_recall, light_confusion
from perception.scoring.nuscenes_report import DISTANCE_BANDS, band_name

TASK_PREFIXES = (("Obstacles (nuScenes devkit)", "nuscenes/"), ("Lanes", "lanes/"), ("Traffic lights", "lights/"),
                 ("Drivable area", "drivable/"), ("Evaluation run", "eval/"))
LANE_THRESHOLDS = np.round(np.arange(0.05, 0.951, 0.05), 2)


def file_sha256(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_hash(cfg) -> str:
    """SHA-256 (first 16 hex) of the parsed config: the same settings give the same hash."""
    text = json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_report(cfg, sources: list, per_image: dict[str, dict], metrics: dict[str, float], predictor,
                 directory: str, checkpoint_label: str) -> float:
    """Write the report into ``directory``; the seconds it took."""
    start = time.perf_counter()
    os.makedirs(directory, exist_ok=True)
    sections = [_header(cfg, sources, checkpoint_label), _metrics_tables(metrics), _obstacles(cfg, metrics, directory),
                _lanes(cfg, per_image, metrics, directory), _lights(cfg, per_image, directory)]
    gallery = write_gallery(cfg, sources, per_image, predictor, os.path.join(directory, "gallery"))
    sections.append(_gallery(gallery))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>perception evaluation report</title>"
            f"<style>{STYLE}</style></head><body><h1>Evaluation report</h1>{''.join(sections)}</body></html>")
    with open(os.path.join(directory, "index.html"), "w") as f:
        f.write(page)
    return time.perf_counter() - start


STYLE = ("body{font-family:sans-serif;margin:24px;max-width:1400px;color:#222}h2{border-bottom:1px solid #ccc;"
         "padding-bottom:4px;margin-top:32px}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid "
         "#ddd;padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f3f3}img{max-width:100%;margin:4px;"
         "border:1px solid #ddd}.figures{display:flex;flex-wrap:wrap;align-items:flex-start}.figures img{max-width:"
         "520px}.note{color:#555;font-size:13px}figure{margin:4px;display:inline-block;max-width:820px}"
         "figcaption{font-size:12px;color:#444}")


def _section(section_id: str, title: str, body: str) -> str:
    return f"<section id='{section_id}'><h2>{html.escape(title)}</h2>{body}</section>"


def _table(rows: list[tuple], header: tuple) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_format(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _format(value) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:.4f}"
    return str(value)


def _images(paths: list[str | None], directory: str) -> str:
    images = [f"<img src='{html.escape(os.path.relpath(p, directory))}' alt='{html.escape(os.path.basename(p))}'>"
              for p in paths if p]
    return f"<div class='figures'>{''.join(images)}</div>"


def _header(cfg, sources: list, checkpoint_label: str) -> str:
    backbone = cfg.model.backbone
    heads = [f.name for f in dataclasses.fields(cfg.model.heads) if getattr(cfg.model.heads, f.name) is not None]
    checkpoint_hash = file_sha256(checkpoint_label) or "n/a (not a file)"
    overrides = {k: getattr(backbone, k) for k in ("embed_dim", "depths", "num_heads") if getattr(backbone, k)}
    rows = [("model", f"{backbone.name} {overrides or ''}, heads: {', '.join(heads)}, input {list(cfg.input_size)}"),
            ("config hash (SHA-256 of the parsed config, first 16)", config_hash(cfg)),
            ("checkpoint / model", checkpoint_label), ("its SHA-256", checkpoint_hash),
            ("data", "; ".join(f"{d.name}: {len(d.infos)} images" for d in sources)),
            ("nuScenes data root / split", f"{cfg.data_root} / {cfg.val_split}"),
            ("written", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))]
    return _section("run", "What was evaluated", _table(rows, ("", "")))


def _metrics_tables(metrics: dict[str, float]) -> str:
    parts = []
    for title, prefix in TASK_PREFIXES:
        rows = [(k[len(prefix):], v) for k, v in sorted(metrics.items())
                if k.startswith(prefix) and not _band_class_key(k)]  # those are tabled under Obstacles
        if rows:
            parts.append(f"<h3>{html.escape(title)}</h3>" + _table(rows, ("metric", "value")))
    note = ("<p class='note'>Keys ending in _bdd100k are the BDD100K-format split; the others the nuScenes "
            "split (lanes/F1 and lights: every labelled image).</p>")
    return _section("metrics", "Metrics", note + "".join(parts))


def _band_class_key(key: str) -> bool:
    """``nuscenes/AP_<band>_<class>``: AP of one class in one distance band."""
    return any(key.startswith(f"nuscenes/AP_{band_name(lo, hi)}_") for lo, hi in DISTANCE_BANDS)


def _obstacles(cfg, metrics: dict[str, float], directory: str) -> str:
    if cfg.model.heads.obstacles is None:
        return _section("obstacles", "Obstacles", "<p>The model has no obstacle head.</p>")
    plot_dir = os.path.join(directory, "nuscenes_plots")
    order = ["summary"] + [f"dist_pr_{t}" for t in (0.5, 1.0, 2.0, 4.0)]
    devkit = [os.path.join(plot_dir, f"{name}.png") for name in order]
    devkit = [p for p in devkit if os.path.isfile(p)]
    bands = {band_name(lo, hi): metrics.get(f"nuscenes/AP_{band_name(lo, hi)}", float("nan"))
             for lo, hi in DISTANCE_BANDS}
    classes = {name: metrics[f"nuscenes/AP_{name}"] for name in DETECTION_CLASSES if f"nuscenes/AP_{name}" in metrics}
    class_pairs = [[os.path.join(plot_dir, f"{name}_{kind}.png") for kind in ("pr", "tp")]
                   for name in classes if os.path.isfile(os.path.join(plot_dir, f"{name}_pr.png"))]
    figures = [bar_plot(bands, "mAP by distance band", "AP",
                        os.path.join(directory, "obstacles_ap_by_distance.png")),
               bar_plot(classes, "AP by class (devkit)", "AP", os.path.join(directory, "obstacles_ap_by_class.png"))]
    rows = [(name, value, *(metrics.get(f"nuscenes/AP_{band}_{name}", float("nan")) for band in bands))
            for name, value in classes.items()]
    rows.append(("mean over classes", metrics.get("nuscenes/mAP", float("nan")), *bands.values()))
    body = ("<h3>AP by distance band and by class</h3><p class='note'>n/a: no ground truth of that class in the "
            "band (the devkit scores each class only up to its own range: 30 m for cones and barriers, 40 m for "
            "people and two-wheelers, 50 m for vehicles).</p>"
            + _table(rows, ("class", "AP (all distances)", *(f"AP {band}" for band in bands)))
            + _images(figures, directory))
    if devkit:
        body += "<h3>The devkit's curves</h3>" + _images(devkit, directory)
        body += ("<h3>Per class: precision/recall and true-positive errors (devkit)</h3>"
                 + "".join(_images(pair, directory) for pair in class_pairs))
    else:
        body += "<p>The devkit drew no curves: the model made no detection on this split.</p>"
    return _section("obstacles", "Obstacles", body)


def _lanes(cfg, per_image: dict[str, dict], metrics: dict[str, float], directory: str) -> str:
    if cfg.model.heads.lanes is None:
        return _section("lanes", "Lanes", "<p>The model has no lane head.</p>")
    entries = [r["lane_sweep"] for r in per_image.values() if "lane_sweep" in r]
    precision, recall = lane_precision_recall(entries, LANE_THRESHOLDS)
    operating = None
    if "lanes/precision" in metrics and metrics["lanes/precision"] == metrics["lanes/precision"]:
        operating = (metrics["lanes/recall"], metrics["lanes/precision"])
    figure = precision_recall_plot({"CULane-style matching (IoU 0.5, 30 px at 1640)": (recall, precision)},
                                   "lanes: precision / recall over the score threshold",
                                   os.path.join(directory, "lanes_pr.png"), operating)
    rows = [(f"{t:.2f}", p, r, 2 * p * r / (p + r) if p + r else 0.0)
            for t, p, r in zip(LANE_THRESHOLDS, precision, recall)]
    official = [(k[len("lanes/"):], v) for k, v in sorted(metrics.items()) if k.startswith("lanes/F1_pix")]
    body = _images([figure], directory) + _table(rows, ("score threshold", "precision", "recall", "F1"))
    if official:
        body += ("<h3>BDD100K's lane-marking F-score (foreground, 1 / 2 / 5 px)</h3>"
                 + _table(official, ("metric", "value")))
    return _section("lanes", "Lanes", body)


def _lights(cfg, per_image: dict[str, dict], directory: str) -> str:
    if cfg.model.heads.lights is None:
        return _section("lights", "Traffic lights", "<p>The model has no traffic-light head.</p>")
    frames = [per_image[k] for k in sorted(per_image) if "lights" in per_image[k]]
    if not frames:
        return _section("lights", "Traffic lights", "<p>No traffic-light-labelled frames in the evaluated data.</p>")
    precision = coco_precision50([r["lights_gt"] for r in frames], [r["lights"] for r in frames], LIGHT_STATES)
    recall_points = np.linspace(0, 1, 101)
    curves = {}
    if precision is not None:
        for k, state in enumerate(LIGHT_STATES):
            column = precision[:, k]
            if (column > -1).any():
                curves[state] = (recall_points, np.clip(column, 0, None))
    pr = precision_recall_plot(curves, "traffic lights: precision / recall at IoU 0.5 (pycocotools)",
                               os.path.join(directory, "lights_pr.png"))
    matrix = light_confusion([(r["lights"], r["lights_gt"]) for r in frames], len(LIGHT_STATES))
    confusion = confusion_plot(matrix, list(LIGHT_STATES) + ["none"],
                               f"light states at score >= {REPORT_MIN_SCORE} (IoU 0.5)",
                               os.path.join(directory, "lights_confusion.png"))
    return _section("lights", "Traffic lights", _images([pr, confusion], directory))


def _gallery(gallery: dict) -> str:
    if not gallery:
        return _section("gallery", "Best and worst frames", "<p>No frame could be scored for any task.</p>")
    body = ("<p class='note'>Predictions in their task colours, ground truth in magenta; obstacles with a "
            f"bird's-eye panel (ego at the bottom). Scores at the operating point {REPORT_MIN_SCORE}.</p>")
    for task, kinds in gallery.items():
        body += f"<h3>{html.escape(task)}</h3>"
        for kind, entries in kinds.items():
            figures = "".join(f"<figure><img src='gallery/{html.escape(name)}' alt='{html.escape(key)}'><figcaption>"
                              f"{kind}: {html.escape(key)} (score {score:.3f})</figcaption></figure>"
                              for key, score, name in entries)
            body += f"<div class='figures'>{figures}</div>"
    return _section("gallery", "Best and worst frames", body)
