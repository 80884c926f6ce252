#!/usr/bin/env python
"""Where a trained lane head's held-out F1 is lost: in the representation, in the geometry of its lanes, or in
their scores; and on which lane shapes.

    python bench/lane_error.py configs/demo_synthetic.py work_dirs/demo/checkpoints/last.ckpt

Over the held-out lane-labelled images (the config's val split and, when mixed in, BDD100K's), every labelled
lane is scored three ways, at the lane F1's own matching (CULane-style drawn lines, IoU >= 0.5):

1. Representation: the lane encoded at the head's anchor rows and decoded again (no network). What fails here
   no head of this shape can find.
2. Best candidate: the best IoU of any query above ``CANDIDATE_SCORE`` (visible rows, the config's line fit,
   no NMS). A lane whose best candidate is below 0.5 is missed whatever the scores; the oracle F1 keeps exactly
   the matched candidates, so it is the F1 perfect scores would give with these lanes' geometry.
3. Shipped: matched by the config's full post-processing (threshold, NMS, line fit): the F1 the evaluation reports.

Each is printed by the lane's shape: its bend, the largest distance of the labelled polyline from the chord
between its ends (input px), and, for the best candidates, the median distance in x over the rows both cover.
Without a checkpoint the network is randomly initialised (a smoke run: the figures mean nothing).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import numpy as np
import torch

from perception.metrics.lanes import IOU_THRESHOLD, matched_truths  # the lane F1's own matching

CANDIDATE_SCORE = 0.05
# Bend buckets (input px): straight within a row's pixel, gently curved, curved.
SHAPES = (("straight", 0.0, 2.0), ("gentle", 2.0, 20.0), ("curved", 20.0, float("inf")))


def bend_px(polyline: np.ndarray, scale: float) -> float:
    """Largest distance in x (input px: original px x ``scale``) of a polyline [N,2] from its end-to-end chord."""
    points = polyline[np.argsort(polyline[:, 1])]
    top, bottom = points[0], points[-1]
    if bottom[1] - top[1] < 1e-6:  # a horizontal lane: no row-wise chord
        return 0.0
    chord_x = np.interp(points[:, 1], [top[1], bottom[1]], [top[0], bottom[0]])
    return float(np.abs(points[:, 0] - chord_x).max() * scale)


def median_dx_px(truth: np.ndarray, prediction: np.ndarray, scale: float) -> float:
    """Median |x difference| (input px) over the rows both polylines span; inf when they share no rows."""
    low, high = max(truth[:, 1].min(), prediction[:, 1].min()), min(truth[:, 1].max(), prediction[:, 1].max())
    if high <= low:
        return float("inf")
    ys = np.linspace(low, high, 20)
    t, p = truth[np.argsort(truth[:, 1])], prediction[np.argsort(prediction[:, 1])]
    return float(np.median(np.abs(np.interp(ys, t[:, 1], t[:, 0]) - np.interp(ys, p[:, 1], p[:, 0]))) * scale)


def lane_rows(model, dataset, collate, cfg, batch_size: int = 16) -> list[dict]:
    """One row per labelled lane: dataset, bend (input px), round-trip IoU, best-candidate IoU and median dx,
    matched by the best candidates (oracle) and by the shipped post-processing; plus its image's counts."""
    from torch.utils.data import DataLoader

    from perception.core.lane_coding import anchor_rows, decode_lane, encode_lane
    from perception.data.camera_dataset import to_model_input
    from perception.metrics.lanes import lane_iou_matrix
    from perception.postprocess.lanes import decode_lanes

    post, (height, width) = cfg.postprocess, cfg.input_size
    num_points = cfg.model.heads.lanes.num_points
    row_top = post.lane_row_top or 0.0  # where the head's anchor rows start
    rows = anchor_rows(num_points, height, row_top)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate)
    out_rows = []
    for batch in loader:
        with torch.no_grad():
            outputs = model(to_model_input(batch["images"]))
        for i, meta in enumerate(batch["meta"]):
            if meta["lanes_gt"] is None:
                continue
            truth = [np.asarray(p, np.float64).reshape(-1, 2) for p in meta["lanes_gt"]["polylines"]]
            if not truth:
                continue
            affine, size = meta["affine"], meta["orig_size"]
            inverse = np.linalg.inv(affine)
            scale = float(affine[0, 0])  # original px -> input px
            candidates = decode_lanes(outputs, i, (height, width), affine, CANDIDATE_SCORE,
                                      post.lane_visibility_threshold, post.lane_line_fit_px, None,
                                      post.lane_fit_horizon_row, row_top).polylines
            shipped = decode_lanes(outputs, i, (height, width), affine, post.lane_score_threshold,
                                   post.lane_visibility_threshold, post.lane_line_fit_px,
                                   post.lane_nms_iou, post.lane_fit_horizon_row, row_top).polylines
            iou = lane_iou_matrix(candidates, truth, size)
            oracle = matched_truths(iou)
            found = matched_truths(lane_iou_matrix(shipped, truth, size))
            for g, lane in enumerate(truth):
                xs, visible = encode_lane(lane @ affine[:2, :2].T + affine[:2, 2], rows, width)
                round_trip = 0.0
                if visible.sum() >= 2:
                    decoded = decode_lane(xs / width, visible, (height, width), row_top)
                    decoded = decoded @ inverse[:2, :2].T + inverse[:2, 2]
                    round_trip = float(lane_iou_matrix([decoded], [lane], size)[0, 0])
                best = int(iou[:, g].argmax()) if len(candidates) else -1
                out_rows.append(dict(
                    dataset=meta["dataset"], bend=bend_px(lane, scale), round_trip=round_trip,
                    best_iou=float(iou[best, g]) if best >= 0 else 0.0,
                    best_dx=median_dx_px(lane, candidates[best], scale) if best >= 0 else float("inf"),
                    oracle=bool(oracle[g]), found=bool(found[g]),
                    image_shipped=len(shipped) if g == 0 else 0, image_candidates=len(candidates) if g == 0 else 0))
    return out_rows


def print_lane_error(rows: list[dict]) -> None:
    """The three scorings overall and by shape (see the module docstring)."""
    def f1(tp: int, fp: int, fn: int) -> float:
        return 2 * tp / max(2 * tp + fp + fn, 1)

    for name in sorted({r["dataset"] for r in rows}) + ["all"]:
        part = [r for r in rows if name in ("all", r["dataset"])]
        tp_shipped = sum(r["found"] for r in part)
        shipped = sum(r["image_shipped"] for r in part)
        oracle = sum(r["oracle"] for r in part)
        print(f"{name}: {len(part)} labelled lanes, {sum(r['image_candidates'] for r in part)} candidates "
              f"above {CANDIDATE_SCORE}, {shipped} shipped")
        print(f"  F1 shipped {f1(tp_shipped, shipped - tp_shipped, len(part) - tp_shipped):.3f}   "
              f"oracle F1 (perfect scores, these candidates) {f1(oracle, 0, len(part) - oracle):.3f}   "
              f"representation round trip >= 0.5: {np.mean([r['round_trip'] >= IOU_THRESHOLD for r in part]):.3f}")
    print("by shape (bend: largest x distance from the chord, input px; all datasets):")
    print(f"  {'shape':<9} {'lanes':>5} {'share':>6} {'round trip':>10} {'oracle':>7} {'shipped':>8} "
          f"{'best IoU':>9} {'best dx px':>10}")
    for shape, low, high in SHAPES:
        part = [r for r in rows if low <= r["bend"] < high]
        if not part:
            continue
        print(f"  {shape:<9} {len(part):>5} {len(part) / len(rows):>6.2f} "
              f"{np.mean([r['round_trip'] >= IOU_THRESHOLD for r in part]):>10.2f} "
              f"{np.mean([r['oracle'] for r in part]):>7.2f} {np.mean([r['found'] for r in part]):>8.2f} "
              f"{np.median([r['best_iou'] for r in part]):>9.2f} {np.median([r['best_dx'] for r in part]):>10.1f}")


def main() -> int:
    from mmengine.config import DictAction

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("checkpoint", nargs="?", help="a training checkpoint; none: random weights (smoke run)")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={}, metavar="KEY=VALUE")
    args = parser.parse_args()

    from perception.build import build_datamodule, build_model
    from perception.config import load_config, parse_config
    from perception.core.checkpoint import load_model_weights

    cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
    if cfg.model.heads.lanes is None:
        raise SystemExit(f"{args.config} has no lane head (model.heads.lanes)")
    model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    if args.checkpoint:
        load_model_weights(model, args.checkpoint)
    datamodule = build_datamodule(cfg)
    sources = [datamodule.dataset("val")]
    if cfg.bdd100k is not None:
        sources.append(datamodule.bdd100k_dataset("val"))
    rows = [row for dataset in sources for row in lane_rows(model, dataset, datamodule.collate, cfg)]
    if not rows:
        raise SystemExit("no labelled lanes in the held-out split")
    print_lane_error(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
