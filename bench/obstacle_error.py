#!/usr/bin/env python
"""Where a trained obstacle head's held-out error comes from: depth or direction, and whether the heading is
readable from the pixels at all.

    python bench/obstacle_error.py configs/demo_synthetic.py work_dirs/demo/checkpoints/last.ckpt

1. Translation. Detections of the held-out split (score >= 0.2, the config's NMS) are matched greedily, best
   score first, to a ground-truth object of their class within 4 m (bird's-eye distance of the centres in the
   camera's x-z plane, the devkit's largest threshold). Printed: the mean / median error, the error with the
   true depth put on the predicted ray (what remains is direction) and with the predicted depth on the true ray
   (what remains is depth), the relative depth error, by range.
   Beside the head's depth: the depth a level camera over flat ground reads from the row of the box's foot,
   z = fy x camera height / (v_bottom - cy), from the detection's own 2D box and from the true 2D box (camera
   height: the median over the split of the true boxes' bottom, y + h / 2 in the camera frame). The foot row is
   the nearest ground point, not the centre, so each is also printed scaled by its best constant (fitted on the
   same detections: a ceiling for a prior + one correction). Where even the true box's foot row is no better than
   the head, a ground-plane depth prior cannot be a large gain.
2. Heading. Classifiers over 8 heading bins (yaw_cam), trained on the training split's ground-truth boxes and
   scored on the held-out ones, read: the box alone (where it is, how big), a 5 x 7 grid of RGB samples over
   the box, or of the trained neck's stride-4 features. The RGB probe is a ceiling of sorts for what a head
   could read from this much data; mean |error| above 1 rad earns nothing in NDS (the devkit caps mAOE at 1).

Without a checkpoint the network is randomly initialised (a smoke run: the figures mean nothing).
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MATCH_DISTANCE_M = 4.0
SCORE_THRESHOLD = 0.2
GRID = (5, 7)  # rows, columns of samples over a box
HEADING_BINS = 8


def load_model(cfg, checkpoint: str | None) -> nn.Module:
    from perception.build import build_model
    from perception.core.checkpoint import load_model_weights

    model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    if checkpoint:
        load_model_weights(model, checkpoint)
    return model


def translation_rows(model, dataset, cfg, batch_size: int = 16) -> list[dict]:
    """One row per matched detection: true depth z, depth error dz (m), bird's-eye error and its two halves."""
    from perception.data.camera_dataset import to_model_input
    from perception.postprocess.obstacles import decode_image

    rows = []
    bottoms = []  # true boxes' bottom y in the camera frame (camera height over flat ground)
    for start in range(0, len(dataset), batch_size):
        items = [dataset[i] for i in range(start, min(len(dataset), start + batch_size))]
        with torch.no_grad():
            outputs = model(to_model_input(torch.stack([item["image"] for item in items])))
        for index, item in enumerate(items):
            target = item["targets"]["obstacles"]
            if not target["valid"] or len(target["labels"]) == 0:
                continue
            intrinsics = target["intrinsics"].double().numpy()
            found = decode_image(outputs, index, intrinsics, tuple(cfg.input_size), score_threshold=SCORE_THRESHOLD,
                                 nms_iou=cfg.postprocess.obstacle_nms_iou)
            box_rows = found.boxes_2d[:, [1, 3]] * cfg.input_size[0]  # [N,2] (cy, h) input px
            centres, labels = target["center_cam"].double().numpy(), target["labels"].numpy()  # [M,3] camera frame
            true_bottom = target["boxes_xyxy"].double().numpy()[:, 3]  # input px
            bottoms.extend(centres[:, 1] + target["size_wlh"].double().numpy()[:, 2] / 2)
            free = np.ones(len(labels), dtype=bool)
            for k in np.argsort(-found.scores):
                distance = np.hypot(centres[:, 0] - found.center_cam[k, 0], centres[:, 2] - found.center_cam[k, 2])
                distance[(labels != found.labels[k]) | ~free] = np.inf
                g = int(np.argmin(distance))
                if distance[g] > MATCH_DISTANCE_M:
                    continue
                free[g] = False
                truth, predicted = centres[g], found.center_cam[k]
                true_depth_on_predicted_ray = predicted / predicted[2] * truth[2]
                predicted_depth_on_true_ray = truth / truth[2] * predicted[2]
                rows.append(dict(z=truth[2], dz=predicted[2] - truth[2], error=distance[g], fy=intrinsics[1, 1],
                                 foot_rows=(box_rows[k, 0] + box_rows[k, 1] / 2 - intrinsics[1, 2],
                                            true_bottom[g] - intrinsics[1, 2]),
                                 error_direction=np.hypot(*(true_depth_on_predicted_ray - truth)[[0, 2]]),
                                 error_depth=np.hypot(*(predicted_depth_on_true_ray - truth)[[0, 2]])))
    camera_height = float(np.median(bottoms)) if bottoms else float("nan")
    for row in rows:  # depth of the foot row on flat ground, from the detection's box and from the true box
        row["z_foot"], row["z_foot_true"] = (row["fy"] * camera_height / max(v, 1.0) for v in row.pop("foot_rows"))
        row["camera_height"] = camera_height
    return rows


def print_translation(rows: list[dict]) -> None:
    print(f"matched detections (same class, within {MATCH_DISTANCE_M:g} m): {len(rows)}")
    if not rows:
        return
    for lo, hi in ((0, 200), (0, 10), (10, 20), (20, 30), (30, 200)):
        sub = [r for r in rows if lo <= r["z"] < hi]
        if not sub:
            continue
        mean = {key: float(np.mean([r[key] for r in sub])) for key in ("error", "error_direction", "error_depth")}
        relative = float(np.median([abs(r["dz"]) / r["z"] for r in sub]))
        label = "all" if hi == 200 and lo == 0 else f"z {lo}-{hi if hi < 200 else ''} m"
        print(f"  {label:10s} n={len(sub):4d}  error {mean['error']:.2f} m  | true depth on predicted ray "
              f"{mean['error_direction']:.2f} m  | predicted depth on true ray {mean['error_depth']:.2f} m  | "
              f"median |dz|/z {relative:.3f}")
    height = rows[0]["camera_height"]
    print(f"  median |dz|/z of the depth read from the foot row on flat ground, camera {height:.2f} m "
          "over it (raw / x the best constant):")
    z = np.array([r["z"] for r in rows])
    for key, name in (("z_foot", "the detection's 2D box"), ("z_foot_true", "the true 2D box")):
        foot = np.array([r[key] for r in rows])
        scaled = foot * float(np.median(z / foot))
        print(f"    {name:22s} " + "  ".join(
            f"{label} {np.median(np.abs(foot[m] - z[m]) / z[m]):.3f} / {np.median(np.abs(scaled[m] - z[m]) / z[m]):.3f}"
            for label, m in (("all", z >= 0), ("z<10", z < 10), ("10-20", (z >= 10) & (z < 20)),
                             ("20-30", (z >= 20) & (z < 30)), ("30+", z >= 30)) if m.any()))


def box_grid(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """boxes [M,4] xyxy pixels -> grid_sample grid [1, M*rows, cols, 2] in [-1, 1] (sample centres of each cell)."""
    rows, cols = GRID
    ys = (torch.arange(rows) + 0.5) / rows
    xs = (torch.arange(cols) + 0.5) / cols
    x = boxes[:, None, None, 0] + xs[None, None, :] * (boxes[:, 2] - boxes[:, 0])[:, None, None]
    y = boxes[:, None, None, 1] + ys[None, :, None] * (boxes[:, 3] - boxes[:, 1])[:, None, None]
    grid = torch.stack([x.expand(-1, rows, cols) / width * 2 - 1, y.expand(-1, rows, cols) / height * 2 - 1], -1)
    return grid.reshape(1, -1, cols, 2)


def crop_features(model, dataset) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per ground-truth object of ``dataset``: {"box" [M,4], "rgb" [M,3*R*C], "neck" [M,D*R*C]} and yaw_cam [M]."""
    from perception.data.camera_dataset import to_model_input

    features: dict[str, list] = {"box": [], "rgb": [], "neck": []}
    yaws = []
    for i in range(len(dataset)):
        item = dataset[i]
        target = item["targets"]["obstacles"]
        if not target["valid"] or len(target["yaw"]) == 0:
            continue
        image = to_model_input(item["image"][None])  # [1,3,H,W]
        height, width = image.shape[-2:]
        boxes = target["boxes_xyxy"].float()
        grid = box_grid(boxes, height, width)
        with torch.no_grad():
            neck = model.neck(model.backbone(image))[0]  # stride 4
        for name, source in (("rgb", image), ("neck", neck)):
            sampled = F.grid_sample(source, grid, align_corners=False)[0]  # [D, M*R, C]
            features[name].append(sampled.reshape(sampled.shape[0], len(boxes), -1).permute(1, 0, 2).flatten(1))
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        features["box"].append(boxes / scale)
        yaws.append(target["yaw"].float())
    return {k: torch.cat(v) for k, v in features.items()}, torch.cat(yaws)


def heading_bin(yaw: torch.Tensor) -> torch.Tensor:
    return torch.round(torch.remainder(yaw, 2 * math.pi) / (2 * math.pi / HEADING_BINS)).long() % HEADING_BINS


def heading_probe(train_x: torch.Tensor, train_yaw: torch.Tensor, test_x: torch.Tensor, test_yaw: torch.Tensor,
                  epochs: int) -> tuple[float, float]:
    """An MLP over standardised features -> (mean |heading error| rad, share > 90 degrees) on the test objects."""
    torch.manual_seed(0)
    mean, std = train_x.mean(0), train_x.std(0) + 1e-5
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    probe = nn.Sequential(nn.Linear(train_x.shape[1], 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, HEADING_BINS))
    optimizer = torch.optim.AdamW(probe.parameters(), 1e-3, weight_decay=1e-2)
    labels = heading_bin(train_yaw)
    for _ in range(epochs):
        for batch in torch.randperm(len(train_x)).split(256):
            loss = F.cross_entropy(probe(train_x[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    probe.eval()
    with torch.no_grad():
        predicted = probe(test_x).argmax(-1).float() * (2 * math.pi / HEADING_BINS)
    error = (torch.remainder(predicted - test_yaw + math.pi, 2 * math.pi) - math.pi).abs()
    return float(error.mean()), float((error > math.pi / 2).float().mean())


def main() -> int:
    from mmengine.config import DictAction

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("checkpoint", nargs="?", help="a training checkpoint; none: random weights (smoke run)")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={}, metavar="KEY=VALUE")
    parser.add_argument("--probe-epochs", type=int, default=60)
    args = parser.parse_args()
    from perception.build import build_datamodule
    from perception.config import load_config, parse_config

    cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
    torch.manual_seed(0)
    model = load_model(cfg, args.checkpoint)
    datamodule = build_datamodule(cfg)
    print(f"{args.config}  checkpoint {args.checkpoint or '(none: random weights)'}")
    print_translation(translation_rows(model, datamodule.dataset("val"), cfg))
    train, train_yaw = crop_features(model, datamodule.dataset("train"))
    test, test_yaw = crop_features(model, datamodule.dataset("val"))
    print(f"heading probes ({HEADING_BINS} bins; {len(train_yaw)} training objects, {len(test_yaw)} held-out; "
          f"a constant guess scores about {math.pi / 2:.2f} rad):")
    for sources in (("box",), ("rgb", "box"), ("neck", "box")):
        error, flipped = heading_probe(torch.cat([train[s] for s in sources], 1), train_yaw,
                                       torch.cat([test[s] for s in sources], 1), test_yaw, args.probe_epochs)
        print(f"  {' + '.join(sources):12s} mean |error| {error:.2f} rad, {flipped:.0%} more than 90 degrees off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
