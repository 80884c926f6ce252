"""Lanes: a DETR-style head whose queries are row-anchored lane curves (perception.core.lane_coding).

Labels: nuScenes map-derived lanes (the ``lane_cameras`` only) and BDD100K lane markings. Scored by
CULane-style F1 (IoU of widened curves >= 0.5) per dataset and overall; BDD100K's own pixel F-scores
are reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from perception.core.errors import ConfigError
from perception.core.lane_coding import LANE_CLASSES
from perception.losses.lane_loss import LINE_IOU_LOSS, LOSS_NAMES, ROW_CE_LOSS, LaneCriterion, LaneMatcher
from perception.metrics.bdd100k import lane_fscores, mean_lane_fscores
from perception.metrics.lanes import LaneF1, match_lanes
from perception.models.heads.lane_marking import MARKING_SEARCH
from perception.postprocess.lanes import decode_lanes
from perception.tasks.base import ScoringContext, Task, validate_query_head
from perception.tasks.decoder_config import QueryDecoderConfig

SWEEP_MIN_SCORE = 0.05  # the report's precision/recall sweep starts here


@dataclass
class LaneHeadConfig(QueryDecoderConfig):
    num_queries: int = 20
    num_points: int = 24  # row anchors spread over the input height below row_top (perception.core.lane_coding)
    # Where the anchor rows start, a fraction of the input height: lanes lie below the horizon, and rows above it are
    # never crossed (UFLD's CULane rows start at 0.42). 0: the whole height.
    row_top: float = 0.0
    # The final points snap to a stride-4 lane-marking map within snap_radius cells (models/heads/lane_marking.py).
    marking_refinement: bool = False
    snap_radius: int = 4
    # How the snap searches: "window" (within snap_radius cells), "row" (the whole row under a Gaussian prior
    # around the query's x, learned width) or "kernel" (as "row", plus each query's own 1x1 kernel on the map's
    # features, trained by a per-row cross-entropy on the labelled cell: loss lane_row_ce).
    marking_search: str = "window"
    # With marking_search="row": a sub-cell offset per map cell and a learned sharpness of the map's logits.
    marking_offsets: bool = False
    # With marking_search="row": the corrections found on painted rows, fitted as offset + slope over the rows,
    # move the unpainted rows too (dashed markings' gaps; lane_marking.fit_through_gaps).
    gap_fit: bool = False
    # The horizon's row in [0, 1] of the input height, or None. Given, proposals and refinements get a perspective
    # term beside the cubic in y: a lane that curves on flat ground images as x = a (y - h) + b + c / (y - h)
    # (LSTR), which sweeps sideways near the horizon as no cubic does (models/heads/lanes.py). Needs crops that keep
    # the principal row fixed (augment.keep_principal_row) so that one row is the horizon of every image. Off: in the
    # demo it cost lane F1 (convergence study, lane_perspective: 0.303 against 0.346 at seed 0).
    horizon_row: float | None = None
    # With marking_refinement: the final decoder layer's points, before the marking search moves them, get an L1 on
    # the labelled rows of their matched lane (added to lane_points), as every earlier layer's do. Without it that
    # layer learns its geometry only through the search's prior, and it refined nothing: on run 17's held-out lanes
    # the best query's rows were as far off after it as after the first layer (5.3 / 15.8 px in the far third of
    # straight / curved lanes), and the search cannot place the rows it finds no paint on (bench/lane_error.py).
    # Off: with it the last layer still refined nothing and lane F1 fell (convergence study, lane_query_point_loss:
    # 0.489 against 0.508 at seed 0).
    query_point_loss: bool = False
    # With marking_refinement: residual dilated 3x3 conv blocks (these dilations, in cells of the stride-4 map) after
    # the marking map's two plain ones, so the map sees a lane's painted stretches and the road's edge around the
    # stretches that are hidden or unpainted (lane_marking.MarkingMap). Empty: the two plain convs (5 cells).
    # Convergence study, lane_marking_context ([2, 4, 8]): lane F1 0.548 / 0.514 at seeds 0 / 1 with
    # postprocess.lane_line_fit_px=None (run 17 with its line fit: 0.508 / 0.492); light AP50 0.510 / 0.619.
    marking_context_dilations: tuple = ()
    # With marking_search="kernel": at inference each lane's class probability p becomes p^(1 - w) c^w, w this weight
    # and c the mean over its drawn rows of the row distribution's largest probability (how sure the map is where the
    # lane crosses each row; lane_marking.rescore_by_row_confidence). 0: the class score alone. Training is unchanged.
    row_confidence_score: float = 0.0


class LaneTask(Task):
    name = "lanes"
    config_class = LaneHeadConfig
    labelled_datasets = ("nuscenes", "bdd100k")
    # lane_line_iou is computed only when its weight is > 0; lane_row_ce only with marking_search="kernel"
    loss_names = LOSS_NAMES + (LINE_IOU_LOSS, ROW_CE_LOSS)
    output_meanings = {
        "lanes.logits": "[B,Q,C] lane class logits, sigmoid (no background class); C = lane classes",
        "lanes.points": "[B,Q,P] x at P anchor rows y_k = (t + (k + 0.5) / P * (1 - t)) * H, t = postprocess "
                        "parameter lane_row_top, divided by the input width "
                        "(outside [0, 1]: the lane is off the image at that row; use lanes.visibility)",
        "lanes.visibility": "[B,Q,P] logit that the lane crosses anchor row k inside the image",
    }
    class_names = {"lanes": list(LANE_CLASSES)}
    postprocess_code = "perception.postprocess.lanes.decode_lanes"
    query_outputs = True
    int8_float = True  # INT8 moved the lane points by tens of pixels (perception.export.int8)

    def validate(self, head: LaneHeadConfig, cfg) -> None:
        validate_query_head(self.name, head)
        if head.num_points < 2:
            raise ConfigError(f"model.heads.lanes.num_points must be >= 2, got {head.num_points}")
        if not 0.0 <= head.row_top < 1.0:  # the parser has made it a float (perception.config._parse)
            raise ConfigError(f"model.heads.lanes.row_top must be in [0, 1) of the input height, got {head.row_top!r}")
        # Decoding reads the rows from the post-processing parameters (the ONNX sidecar carries them): one value.
        if cfg.postprocess.lane_row_top is None:
            cfg.postprocess.lane_row_top = head.row_top
        elif cfg.postprocess.lane_row_top != head.row_top:
            raise ConfigError(f"postprocess.lane_row_top ({cfg.postprocess.lane_row_top}) must equal "
                              f"model.heads.lanes.row_top ({head.row_top}), where the head's rows start; leave it "
                              "unset and it is taken from there")
        if head.snap_radius < 1:
            raise ConfigError(f"model.heads.lanes.snap_radius must be >= 1 (cells of the stride-4 marking map), "
                              f"got {head.snap_radius}")
        if head.marking_search not in MARKING_SEARCH:
            raise ConfigError(f"model.heads.lanes.marking_search must be one of {MARKING_SEARCH}, "
                              f"got {head.marking_search!r}")
        if head.marking_search == "kernel" and not head.marking_refinement:
            raise ConfigError("model.heads.lanes.marking_search='kernel' needs "
                              "model.heads.lanes.marking_refinement=True (the kernels read the marking map's features)")
        if head.marking_offsets and head.marking_search != "row":
            raise ConfigError("model.heads.lanes.marking_offsets needs model.heads.lanes.marking_search='row'")
        if head.gap_fit and not (head.marking_refinement and head.marking_search == "row"):
            raise ConfigError("model.heads.lanes.gap_fit needs model.heads.lanes.marking_refinement=True and "
                              "marking_search='row' (it fits the corrections the row search finds)")
        if head.query_point_loss and not head.marking_refinement:
            raise ConfigError("model.heads.lanes.query_point_loss needs model.heads.lanes.marking_refinement=True (it "
                              "supervises the decoder's points before the marking search; without the search the final "
                              "points are the decoder's and already have their L1)")
        if head.marking_context_dilations and not head.marking_refinement:
            raise ConfigError("model.heads.lanes.marking_context_dilations needs "
                              "model.heads.lanes.marking_refinement=True (they widen the marking map's view)")
        if any(not isinstance(d, int) or d < 1 for d in head.marking_context_dilations):
            raise ConfigError(f"model.heads.lanes.marking_context_dilations must be whole numbers >= 1 (cells of the "
                              f"stride-4 map), got {head.marking_context_dilations!r}")
        if not 0.0 <= head.row_confidence_score < 1.0:
            raise ConfigError(f"model.heads.lanes.row_confidence_score must be in [0, 1) (the rows' confidence's "
                              f"share of the lane score), got {head.row_confidence_score!r}")
        if head.row_confidence_score and head.marking_search != "kernel":
            raise ConfigError("model.heads.lanes.row_confidence_score needs model.heads.lanes.marking_search='kernel' "
                              "(the confidence is that of the kernels' row distributions)")
        if head.horizon_row is not None and not 0.0 <= head.horizon_row < 1.0:
            raise ConfigError(f"model.heads.lanes.horizon_row must be in [0, 1) of the input height (or None), "
                              f"got {head.horizon_row}")

    def build_head(self, head: LaneHeadConfig, in_channels: int, input_size: tuple[int, int]):
        from perception.models.heads.lanes import LaneHead

        return LaneHead(in_channels, num_points=head.num_points, marking_refinement=head.marking_refinement,
                        snap_radius=head.snap_radius, marking_search=head.marking_search,
                        marking_offsets=head.marking_offsets, gap_fit=head.gap_fit, horizon_row=head.horizon_row,
                        row_top=head.row_top, query_point_loss=head.query_point_loss,
                        marking_context_dilations=head.marking_context_dilations,
                        row_confidence_score=head.row_confidence_score, **head.decoder_kwargs())

    def build_criterion(self, cfg):
        m = cfg.matcher
        head = cfg.model.heads.lanes  # None in a config without the lane head (built for its loss names)
        return LaneCriterion(LaneMatcher(m.cost_class, m.cost_points), dense_weight=m.dense_weight,
                             dense_class_positives=m.dense_class_positives,
                             line_iou=cfg.loss_weights.get(LINE_IOU_LOSS, 0.0) > 0,
                             row_classification=head is not None and head.marking_search == "kernel",
                             one_to_many_iou=m.lane_one_to_many_iou,
                             one_to_many_regression=m.lane_one_to_many_regression,
                             quality_targets=m.lane_quality_targets,
                             row_top=head.row_top if head is not None else 0.0)

    def empty_targets(self) -> dict:
        return {"valid": False, "polylines": [], "labels": torch.zeros(0, dtype=torch.int64)}

    def item_targets(self, dataset, info: dict, out: dict) -> dict | None:
        """Polylines in input px ([K,2] each, through the item's affine); ``valid``: the image is labelled."""
        if dataset.name == "nuscenes":  # lanes are labelled in the lane cameras only (markings run away from them)
            valid, lanes = info["camera"] in dataset.lane_cameras, info["lanes"]
        elif dataset.name == "bdd100k":
            valid, lanes = info["lanes"] is not None, info["lanes"] or {"labels": []}
        else:
            return None
        return {"valid": valid, "polylines": out["lanes"], "labels": torch.as_tensor(lanes["labels"],
                                                                                      dtype=torch.int64)}

    def decode(self, outputs, i, input_size, affine, orig_size, post, input_intrinsics=None):
        """ImageLanes: polylines in original pixels, labels, scores."""
        return decode_lanes(outputs, i, tuple(input_size), affine, post.lane_score_threshold,
                            post.lane_visibility_threshold, post.lane_line_fit_px, post.lane_nms_iou,
                            post.lane_fit_horizon_row, post.lane_row_top)

    def draw(self, canvas, prediction, intrinsics, min_score) -> None:
        from perception.drawing import draw_lanes

        draw_lanes(canvas, prediction)

    def image_result(self, cfg, dataset, outputs, i, meta, info) -> dict:
        if meta["lanes_gt"] is None:
            return {}
        lanes = self.decode(outputs, i, cfg.input_size, meta["affine"], meta["orig_size"], cfg.postprocess)
        truth = [np.asarray(p, np.float64) for p in meta["lanes_gt"]["polylines"]]
        result = {"lanes": match_lanes(lanes.polylines, truth, meta["orig_size"])}
        if meta["dataset"] == "bdd100k":
            result["lanes_bdd"] = lane_fscores(lanes.polylines, truth, meta["orig_size"])
        if info is not None:  # every lane above a low score, for the report's precision/recall sweep
            from perception.scoring.frame_scores import lane_sweep_entry

            low = decode_lanes(outputs, i, tuple(cfg.input_size), meta["affine"], SWEEP_MIN_SCORE,
                               cfg.postprocess.lane_visibility_threshold, cfg.postprocess.lane_line_fit_px,
                               cfg.postprocess.lane_nms_iou, cfg.postprocess.lane_fit_horizon_row,
                               cfg.postprocess.lane_row_top)
            result["lane_sweep"] = lane_sweep_entry(low.polylines, low.scores, truth, meta["orig_size"])
        return result

    def score(self, results: list[dict], context: ScoringContext) -> dict[str, float]:
        metrics: dict[str, float] = {}
        by_dataset = {name: [r["lanes"] for r in results if r["dataset"] == name and "lanes" in r]
                      for name in ("nuscenes", "bdd100k")}
        if any(by_dataset.values()):
            overall = LaneF1()
            for name, matches in by_dataset.items():
                if not matches:
                    continue
                per_dataset = LaneF1()
                for tp, fp, fn in matches:
                    per_dataset.add(tp, fp, fn)
                    overall.add(tp, fp, fn)
                metrics[f"lanes/F1_{name}"] = per_dataset.compute()["F1"]
            metrics.update({f"lanes/{k}": v for k, v in overall.compute().items()})
        official = [r["lanes_bdd"] for r in results if "lanes_bdd" in r]
        if official:
            metrics.update({f"lanes/{k}_bdd100k": v for k, v in mean_lane_fscores(official).items()})
        return metrics


LANES = LaneTask()
