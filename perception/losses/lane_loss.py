"""Lane matching and set criterion: focal class loss, L1 on the visible rows, visibility BCE and, when
its weight is set, CLRNet's line IoU.

Ground-truth polylines (input pixels) are encoded to the head's row anchors here, so the dataset
stays independent of the model's number of rows. Only images that carry lane labels count; an
image labelled with zero lanes pushes every query's lane scores down.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from perception.core.lane_coding import MIN_VISIBLE_ROWS, anchor_rows, encode_lane
from perception.core.lane_overlap import lane_overlap_iou, paired_lane_overlap_iou, row_half_widths
from perception.losses.box_set_loss import (
    SetCriterion,
    add_one_to_many,
    assigned_pairs,
    gather_matched,
    gather_pairs,
    queries_overlapping,
)
from perception.losses.dense_assign import lane_assign, lane_candidates, level_sizes, token_cell_widths
from perception.losses.dice import soft_dice_loss
from perception.losses.matcher import focal_class_cost, solve_assignments

LOSS_NAMES = ("lane_cls", "lane_points", "lane_visibility", "lane_mask")
LINE_IOU_LOSS = "lane_line_iou"  # on only when loss_weights.lane_line_iou > 0 (LaneTask.build_criterion)
ROW_CE_LOSS = "lane_row_ce"  # on only with the row kernels (model.heads.lanes.marking_search="kernel")
MASK_LINE_WIDTH = 1  # cells of the mask's level a lane is drawn across
# Half width of the segments the line IoU compares, normalised by the input width: CLRNet's 15 px at its
# 800-px input (CULane's metric draws 15 px either side at 1640; the wider segments keep overlap, and so a
# smooth gradient, for lanes still tens of pixels off).
LINE_IOU_HALF_WIDTH = 15.0 / 800.0


def line_iou_loss(points: torch.Tensor, target: torch.Tensor, visible: torch.Tensor,
                  half_width: float = LINE_IOU_HALF_WIDTH) -> torch.Tensor:
    """1 - line IoU per lane (CLRNet, Zheng et al. 2022): every visible row widens the predicted and the
    true x into segments [x - e, x + e]; IoU = summed overlap / summed union over those rows. The overlap
    goes negative for segments apart, so a far lane still feels its distance; unlike L1 the loss is
    scale-free, read on the rows the metric reads. points, target [K,P] x normalised by the input width;
    visible [K,P] bool or 0/1. Returns [K]."""
    visible = visible.float()
    distance = (points - target).abs()  # (K, P)
    overlap, union = 2 * half_width - distance, 2 * half_width + distance
    iou = (overlap * visible).sum(-1) / (union * visible).sum(-1).clamp(min=1e-9)
    return 1.0 - iou


def row_classification_loss(row_logits: torch.Tensor, target: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy on the labelled cell (UFLD's row-wise classification), mean over each lane's
    visible rows. row_logits [K,P,w] over the w cells of each anchor row (cell c centred at (c + 0.5) / w);
    target [K,P] x normalised by the input width; visible [K,P]. The true x is split between its two nearest
    cell centres in proportion to their distance (a two-cell soft label, GFL's distribution focal loss), so
    the distribution's expectation, which is the predicted x, can reach it between centres. Returns [K]."""
    width = row_logits.shape[-1]
    position = (target.float() * width - 0.5).clamp(0, width - 1)  # (K, P) in cells
    lower = position.floor().clamp(max=width - 2)
    upper_share = position - lower  # (K, P) in [0, 1]
    log_probs = row_logits.float().log_softmax(-1)
    lower_index = lower.long()[..., None]
    nll = -((1 - upper_share) * log_probs.gather(-1, lower_index).squeeze(-1)
            + upper_share * log_probs.gather(-1, lower_index + 1).squeeze(-1))  # (K, P)
    visible = visible.float()
    return (nll * visible).sum(-1) / visible.sum(-1).clamp(min=1)


def quality_focal_loss(logits: torch.Tensor, batch_index: torch.Tensor, query_index: torch.Tensor,
                       labels: torch.Tensor, quality: torch.Tensor, alpha: float, gamma: float) -> torch.Tensor:
    """Sigmoid focal loss with soft targets (GFL's quality focal loss, with the focal alpha), summed: the class
    positives (query ``query_index[k]`` of image ``batch_index[k]``, class ``labels[k]``) target their
    ``quality[k]`` in [0, 1] instead of 1, weighted alpha and modulated by |quality - p|^gamma; every other query
    and class targets 0, weighted 1 - alpha and modulated by p^gamma. With every quality 1 it is
    torchvision's sigmoid_focal_loss. logits [B,Q,C]."""
    target = torch.zeros_like(logits)
    positive = torch.zeros_like(logits, dtype=torch.bool)
    target[batch_index, query_index, labels] = quality.to(logits.dtype)
    positive[batch_index, query_index, labels] = True
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    modulation = (target - logits.sigmoid()).abs().pow(gamma)
    return (torch.where(positive, alpha, 1.0 - alpha) * modulation * ce).sum()


def drawn_rows(points: torch.Tensor, visibility_logits: torch.Tensor) -> torch.Tensor:
    """[..., P] bool: the rows decoding draws a lane through (visible, x inside the image); points normalised x."""
    return (visibility_logits.detach() > 0) & (points.detach() >= 0) & (points.detach() <= 1)


def overlapping_lanes(points: torch.Tensor, visibility_logits: torch.Tensor, targets: list[dict], threshold: float):
    """(image index [K], query index [K], label [K], lane index in its image [K]) of every query whose lane
    (points [B,Q,P] normalised x, drawn where visibility_logits [B,Q,P] > 0 and x inside the image, as decoding
    draws it) overlaps a labelled lane of its image by ``lane_overlap_iou`` >= ``threshold``, labelled as the lane
    it overlaps most. ``targets`` as ``LaneCriterion.encode`` gives them with one-to-many on (their
    ``half_width``)."""
    points = points.detach().float()
    drawn = drawn_rows(points, visibility_logits)
    return queries_overlapping(targets, lambda i, target: lane_overlap_iou(
        points[i], drawn[i], target["points"].float(), target["visible"], target["half_width"]),
        threshold, points.device)


def lane_masks(targets: list[dict], height: int, width: int, device, row_top: float = 0.0) -> torch.Tensor:
    """Encoded lanes (x at the anchor rows, normalised; visible rows; the rows start at ``row_top`` of the
    height) -> float [B,1,h,w]: each lane drawn through its visible rows, ``MASK_LINE_WIDTH`` cells wide."""
    masks = np.zeros((len(targets), 1, height, width), np.uint8)
    if not targets:
        return torch.from_numpy(masks).to(device=device, dtype=torch.float32)
    # The whole batch's lanes in one copy to the host (a copy per image waits for the device each time).
    counts = [len(target["points"]) for target in targets]
    all_points = torch.cat([target["points"] for target in targets]).cpu().numpy()  # (sum M, P)
    all_visible = torch.cat([target["visible"] for target in targets]).cpu().numpy()
    rows = anchor_rows(all_points.shape[1], height, row_top)  # (P,) in mask cells
    for i, start in enumerate(np.cumsum([0] + counts[:-1])):
        points, visible = all_points[start:start + counts[i]], all_visible[start:start + counts[i]]
        for xs, seen in zip(points, visible):
            if seen.sum() < 2:
                continue
            line = np.stack([xs[seen] * width, rows[seen]], axis=1) - 0.5  # cell centres at k + 0.5
            cv2.polylines(masks[i, 0], [np.round(line * 16).astype(np.int32)], False, 1,
                          thickness=MASK_LINE_WIDTH, lineType=cv2.LINE_8, shift=4)
    return torch.from_numpy(masks).to(device=device, dtype=torch.float32)


def lane_mask_loss(logits: torch.Tensor, targets: list[dict], row_top: float = 0.0) -> torch.Tensor:
    """Auxiliary lane-marking mask on the finest memory level: BCE + Dice (markings cover a few %
    of the cells, Dice keeps them from being drowned by the background). logits [B,1,h,w]."""
    truth = lane_masks(targets, logits.shape[-2], logits.shape[-1], logits.device, row_top)
    bce = F.binary_cross_entropy_with_logits(logits.float(), truth)
    dice = soft_dice_loss(logits.float().sigmoid(), truth, dims=tuple(range(truth.dim())))  # over the batch
    return bce + dice


def host_polylines(per_image: list[dict]) -> tuple[list[list[np.ndarray]], list[list[int]]]:
    """Each image's lane polylines [K,2] as host arrays and its labels as ints. Polylines and labels that
    Lightning moved to the accelerator with the batch come back in one copy each for the whole batch."""
    lanes = [polyline for t in per_image for polyline in t["polylines"]]
    labels = [t["labels"] for t in per_image]
    counts = [len(t["polylines"]) for t in per_image]
    if lanes and all(torch.is_tensor(polyline) for polyline in lanes):
        lanes = [chunk.numpy() for chunk in torch.cat(lanes).cpu().split([len(p) for p in lanes])]
    else:
        lanes = [np.asarray(polyline) for polyline in lanes]
    flat_labels = torch.cat([torch.as_tensor(label).reshape(-1) for label in labels]).tolist() if labels else []
    starts = np.cumsum([0] + counts[:-1])
    return ([lanes[s:s + c] for s, c in zip(starts, counts)], [flat_labels[s:s + c] for s, c in zip(starts, counts)])


class LaneMatcher(nn.Module):
    """Cost = focal-style class cost + mean L1 of x over the target's visible rows."""

    def __init__(self, cost_class: float = 2.0, cost_points: float = 5.0, alpha: float = 0.25, gamma: float = 2.0):
        super().__init__()
        self.cost_class, self.cost_points, self.alpha, self.gamma = cost_class, cost_points, alpha, gamma

    @torch.no_grad()
    def forward(self, logits: torch.Tensor, points: torch.Tensor,
                targets: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """logits [B,Q,C], points [B,Q,P]; targets[i]: labels [M], points [M,P], visible [M,P].

        Returns per image (query indices, target indices), int64 [min(Q, M_i)] on the logits' device.
        """
        blocks = []
        for i, target in enumerate(targets):
            if len(target["labels"]) == 0:
                blocks.append(logits.new_zeros(logits.shape[1], 0))
                continue
            cost_class = focal_class_cost(logits[i].float().sigmoid(), target["labels"], self.alpha, self.gamma)
            visible = target["visible"].float()  # (M, P)
            distance = (points[i].float()[:, None] - target["points"][None]).abs()  # (Q, M, P)
            cost_points = (distance * visible).sum(-1) / visible.sum(-1).clamp(min=1)
            blocks.append(self.cost_class * cost_class + self.cost_points * cost_points)
        return solve_assignments(blocks, logits.device)


class LaneCriterion(SetCriterion):
    task = "lanes"
    loss_names = LOSS_NAMES

    def __init__(self, matcher: LaneMatcher | None = None, focal_alpha: float = 0.25, focal_gamma: float = 2.0,
                 dense_weight: float = 1.0, dense_class_positives: str = "all", line_iou: bool = False,
                 row_classification: bool = False, one_to_many_iou: float | None = None,
                 one_to_many_regression: float = 0.0, row_top: float = 0.0, quality_targets: str | None = None):
        """``line_iou``: also return ``lane_line_iou`` (line_iou_loss) for the matched and dense-positive lanes;
        ``row_classification``: also return ``lane_row_ce`` (row_classification_loss) for the matched final
        queries' ``lanes.row_logits``; ``one_to_many_iou``: every decoder query whose lane overlaps a labelled
        lane by at least this ``lane_overlap_iou`` (the F1's IoU, approximated at the rows) is a class positive
        too, not only its Hungarian match; ``one_to_many_regression``: those queries also regress the lane they
        overlap (points, visibility, row classification), averaged over them, at this weight beside the one-to-one
        losses (H-DETR's one-to-many branch on the same queries). 0: off. ``row_top``: where the head's anchor rows
        start, a fraction of the input height (perception.core.lane_coding). ``quality_targets`` (with
        ``one_to_many_iou``): class positives target the overlap of their drawn lane with their labelled one
        (``lane_overlap_iou``) instead of 1, by ``quality_focal_loss`` (IoU-aware classification, as RT-DETR's
        varifocal loss for boxes), so that a score ranks lanes by how well they fit: ``"all"`` every decoder class
        positive, ``"one_to_many"`` only the one-to-many ones (the Hungarian matches keep 1); None: binary."""
        super().__init__(matcher or LaneMatcher(), focal_alpha, focal_gamma, dense_weight, dense_class_positives)
        if one_to_many_regression and one_to_many_iou is None:
            raise ValueError("one_to_many_regression regresses the one-to-many queries: set one_to_many_iou too")
        if quality_targets not in (None, "all", "one_to_many"):
            raise ValueError(f"quality_targets must be None, 'all' or 'one_to_many', got {quality_targets!r}")
        if quality_targets and one_to_many_iou is None:
            raise ValueError("quality_targets measures overlaps with the one-to-many half-widths: set one_to_many_iou")
        self.quality_targets = quality_targets
        self.line_iou = line_iou
        self.one_to_many_iou = one_to_many_iou
        self.one_to_many_regression = one_to_many_regression
        self.row_top = row_top
        self.loss_names = (LOSS_NAMES + ((LINE_IOU_LOSS,) if line_iou else ())
                           + ((ROW_CE_LOSS,) if row_classification else ()))

    def point_losses(self, points: torch.Tensor, target: torch.Tensor, visible: torch.Tensor,
                     count: float) -> dict[str, torch.Tensor]:
        """L1 over the visible rows (and the line IoU when on) of K paired lanes [K,P], summed over them / count."""
        visible = visible.float()
        per_lane = ((points - target).abs() * visible).sum(-1) / visible.sum(-1).clamp(min=1)
        losses = {"lane_points": per_lane.sum() / count}
        if self.line_iou:
            losses[LINE_IOU_LOSS] = line_iou_loss(points, target, visible).sum() / count
        return losses

    def dense_losses(self, pred: dict[str, torch.Tensor], targets: list[dict], input_size: tuple[int, int],
                     propose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Tokens on each lane whose proposal fits it best are positive (dense_assign.lane_assign):
        focal class loss over all tokens, L1 of the positives' points over the lane's visible rows. Only the
        tokens near a lane propose (the assignment compares their proposals; every positive is one of them)."""
        anchors = pred["anchors"][0]  # (N, 4)
        sizes = level_sizes(anchors)
        cell = token_cell_widths(anchors, sizes)  # (N,): once for the batch
        candidates = [lane_candidates(anchors, sizes, t["points"], t["visible"], cell=cell, row_top=self.row_top)
                      for t in targets]  # (N, M) each
        near = torch.stack([c.any(1) for c in candidates])  # (B, N): near any lane of the image
        near_b, near_n = torch.nonzero(near, as_tuple=True)
        near_points = propose(pred["features"][near_b, near_n][None], anchors[near_n][None])[0]  # (K, P)
        points = near_points.new_zeros(*near.shape, near_points.shape[-1])  # (B, N, P): zero where not read
        points[near_b, near_n] = near_points.detach()
        row_of = torch.full(near.shape, -1, dtype=torch.int64, device=near.device)
        row_of[near_b, near_n] = torch.arange(len(near_b), device=near.device)  # token -> row of near_points
        assigned, quality = (torch.stack(v) for v in zip(*[
            lane_assign(anchors, sizes, points[i], t["points"], t["visible"], near=candidates[i])
            for i, t in enumerate(targets)]))  # (B, N) each
        losses = {"lane_cls": self.dense_class_loss(pred["logits"], assigned, quality, targets)}
        batch_index, token_index, flat = assigned_pairs(assigned >= 0, assigned, targets)
        gt_points = torch.cat([t["points"] for t in targets])[flat]
        visible = torch.cat([t["visible"] for t in targets])[flat]
        losses.update(self.point_losses(near_points[row_of[batch_index, token_index]], gt_points, visible,
                                        max(len(batch_index), 1)))
        if "mask" in pred:
            losses["lane_mask"] = lane_mask_loss(pred["mask"], targets, self.row_top)
        return losses

    @staticmethod
    def encode_targets(per_image: list[dict], input_size: tuple[int, int], num_points: int, device,
                       row_top: float = 0.0) -> list[dict]:
        """Polylines (input px) -> labels [M], x at the rows [M,P] (normalised), visible [M,P]; the rows start at
        ``row_top`` of the input height."""
        height, width = input_size
        rows = anchor_rows(num_points, height, row_top)
        polylines, labels_of = host_polylines(per_image)
        encoded = []
        for lanes, image_labels in zip(polylines, labels_of):
            xs, visible, labels = [], [], []
            for polyline, label in zip(lanes, image_labels):
                x, v = encode_lane(polyline, rows, width)
                if v.sum() >= MIN_VISIBLE_ROWS:
                    xs.append(x / width)
                    visible.append(v)
                    labels.append(label)
            encoded.append({
                "labels": torch.as_tensor(labels, dtype=torch.int64, device=device),
                "points": torch.as_tensor(np.asarray(xs, np.float32).reshape(-1, num_points), device=device),
                "visible": torch.as_tensor(np.asarray(visible, bool).reshape(-1, num_points), device=device),
            })
        return encoded

    def encode(self, per_image: list[dict], input_size: tuple[int, int], outputs: dict, device) -> list[dict]:
        targets = self.encode_targets(per_image, input_size, outputs["lanes.points"].shape[-1], device, self.row_top)
        if self.one_to_many_iou is not None:  # the F1's line width per row [M,P], once for every decoder layer
            for target in targets:
                target["half_width"] = row_half_widths(target["points"], target["visible"], input_size,
                                                       self.row_top)
        return targets

    def prefix_losses(self, pred: dict[str, torch.Tensor], targets: list[dict],
                      num_targets: int) -> dict[str, torch.Tensor]:
        matches = self.matcher(pred["logits"], pred["points"], targets)
        batch_index, query_index, matched = gather_matched(matches, targets)
        class_batch, class_query, class_labels = batch_index, query_index, matched["labels"]
        extra = None
        if self.one_to_many_iou is not None and "visibility" in pred:  # decoder layers (proposals draw no rows)
            # A query that already fits a lane as well as the metric counts is not taught "no lane" because
            # another query won the Hungarian match: with one-to-one targets only, the scores ranked the queries
            # that fit a lane barely above the rest (AUROC 0.68), and F1 with perfect scores would be 2.6x.
            extra = overlapping_lanes(pred["points"], pred["visibility"], targets, self.one_to_many_iou)
            class_batch, class_query = torch.cat([batch_index, extra[0]]), torch.cat([query_index, extra[1]])
            class_labels = torch.cat([matched["labels"], extra[2]])
        if extra is not None and self.quality_targets:
            many = self.fit_quality(pred, extra[0], extra[1], gather_pairs(targets, extra[0], extra[3]))
            if self.quality_targets == "one_to_many":  # a Hungarian match keeps 1, also where it is one-to-many
                num_queries = pred["logits"].shape[1]
                matched_keys = batch_index * num_queries + query_index
                many = torch.where(torch.isin(extra[0] * num_queries + extra[1], matched_keys), 1.0, many)
                one = torch.ones_like(query_index, dtype=many.dtype)
            else:
                one = self.fit_quality(pred, batch_index, query_index, matched)
            quality = torch.cat([one, many])
            losses = {"lane_cls": quality_focal_loss(pred["logits"], class_batch, class_query, class_labels, quality,
                                                     self.focal_alpha, self.focal_gamma) / num_targets}
        else:
            losses = {"lane_cls": self.class_loss(pred["logits"], class_batch, class_query, class_labels,
                                                  num_targets)}
        losses.update(self.paired_losses(pred, matched, batch_index, query_index, num_targets))
        if extra is not None and self.one_to_many_regression and len(extra[0]):
            add_one_to_many(losses, self.paired_losses(pred, gather_pairs(targets, extra[0], extra[3]), extra[0],
                                                       extra[1], len(extra[0])), self.one_to_many_regression)
        return losses

    @staticmethod
    def fit_quality(pred: dict[str, torch.Tensor], batch_index: torch.Tensor, query_index: torch.Tensor,
                    paired: dict) -> torch.Tensor:
        """[K] in [0, 1]: ``lane_overlap_iou`` of query ``query_index[k]``'s lane in image ``batch_index[k]``, drawn
        as decoding draws it, with lane k of ``paired`` (encoded targets with their ``half_width``). No gradient."""
        points = pred["points"][batch_index, query_index].detach().float()  # (K, P)
        drawn = drawn_rows(points, pred["visibility"][batch_index, query_index])
        return paired_lane_overlap_iou(points, drawn, paired["points"].float(), paired["visible"],
                                       paired["half_width"])

    def paired_losses(self, pred: dict[str, torch.Tensor], matched: dict, batch_index: torch.Tensor,
                      query_index: torch.Tensor, count: float) -> dict[str, torch.Tensor]:
        """Points (and line IoU), row classification and visibility of query ``query_index[k]`` of image
        ``batch_index[k]`` against lane k of ``matched``, summed over the pairs / count."""
        visible = matched["visible"].float()  # (K, P)
        losses = self.point_losses(pred["points"][batch_index, query_index], matched["points"], visible, count)
        if "query_points" in pred:  # the final decoder layer before the marking search (LaneHead query_point_loss)
            before_search = self.point_losses(pred["query_points"][batch_index, query_index], matched["points"],
                                              visible, count)
            losses = {name: value + before_search[name] for name, value in losses.items()}
        if "row_logits" in pred:  # the final layer with the row kernels
            losses[ROW_CE_LOSS] = row_classification_loss(pred["row_logits"][batch_index, query_index],
                                                          matched["points"], visible).sum() / count
        if "visibility" in pred:  # encoder proposals carry only classes and points
            visibility_logits = pred["visibility"][batch_index, query_index]
            losses["lane_visibility"] = F.binary_cross_entropy_with_logits(
                visibility_logits, visible, reduction="none").mean(-1).sum() / count
        return losses
