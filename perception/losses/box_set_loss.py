"""Set criteria of the DETR-style heads: the shared skeleton and the box heads' losses
(focal class loss, L1 + GIoU on 2D boxes).

Applied to the final decoder layer, every auxiliary layer and the selected encoder proposals,
each with its own Hungarian matching. Only images that carry the task's labels (``valid``)
count; an image labelled with no objects still pushes every query to "nothing here". A batch
without any labelled image gives zero losses that still touch every output of the head, so
data-parallel training sees a gradient (of zero) for every parameter. Non-finite outputs give
NaN losses without matching (the Hungarian solver rejects them), so the training step's
non-finite guard (perception.training.faults) skips the step and names the head's losses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import box_convert, box_iou, generalized_box_iou_loss, sigmoid_focal_loss

from perception.losses.dense_assign import atss_assign, best_of_each, level_sizes
from perception.losses.matcher import HungarianMatcher

LOGGER = logging.getLogger("perception.training")


def non_finite_outputs(outputs: dict, task: str) -> list[str]:
    """Names of the task's floating-point outputs holding NaN or inf (one device sync for all)."""
    names = [k for k, v in outputs.items() if k.startswith(task + ".") and v.is_floating_point()]
    if not names:
        return []
    finite = torch.stack([torch.isfinite(outputs[k].detach()).all() for k in names]).cpu()
    return [k for k, ok in zip(names, finite.tolist()) if not ok]


def output_prefixes(outputs: dict, task: str) -> list[str]:
    """The final prefix, then ``<task>.aux{i}`` in order, then ``<task>.enc`` when present."""
    prefixes = [task]
    prefixes += sorted({k.rsplit(".", 1)[0] for k in outputs if k.startswith(f"{task}.aux")})
    if f"{task}.enc.logits" in outputs:
        prefixes.append(f"{task}.enc")
    return prefixes


def outputs_of(outputs: dict, prefix: str, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"logits": ..., "boxes": ...} of one prefix, restricted to the valid images."""
    depth = prefix.count(".") + 1
    return {k[len(prefix) + 1:]: v[valid] for k, v in outputs.items()
            if k.startswith(prefix + ".") and k.count(".") == depth}


def zero_touching(outputs: dict, task: str) -> torch.Tensor:
    """0.0 connected to every output of ``task`` (see the module docstring)."""
    return sum(v.sum() for k, v in outputs.items() if k.startswith(task + ".")) * 0.0


def gather_matched(matches: list[tuple[torch.Tensor, torch.Tensor]], targets: list[dict]):
    """(image index [K], query index [K], matched targets {key: [K,...]}) of per-image matches."""
    batch_index = torch.cat([torch.full_like(q, i) for i, (q, _) in enumerate(matches)])
    query_index = torch.cat([q for q, _ in matches])
    matched = {k: torch.cat([t[k][j] for t, (_, j) in zip(targets, matches)]) for k in targets[0]}
    return batch_index, query_index, matched


def assigned_pairs(mask: torch.Tensor, assigned: torch.Tensor, targets: list[dict]):
    """(image index [K], token index [K], index into the targets concatenated over images [K]) of the
    tokens where ``mask`` [B,N] holds; ``assigned`` [B,N] is each token's target index in its image."""
    batch_index, token_index = torch.nonzero(mask, as_tuple=True)
    return batch_index, token_index, flat_target_index(targets, batch_index, assigned[batch_index, token_index])


def flat_target_index(targets: list[dict], image_index: torch.Tensor, index_in_image: torch.Tensor) -> torch.Tensor:
    """[K]: where target ``index_in_image[k]`` of image ``image_index[k]`` sits in the targets concatenated over
    the images."""
    offsets = torch.tensor([0] + [len(t["labels"]) for t in targets], device=image_index.device).cumsum(0)
    return offsets[image_index] + index_in_image


class SetCriterion(nn.Module):
    """Skeleton of a set criterion: keep the labelled images, encode their targets once, then
    match and score every prefix (final, auxiliary layers, proposals). Subclasses set ``task``
    and ``loss_names`` and implement ``encode`` and ``prefix_losses``."""

    task = ""  # key of the outputs and of the targets
    loss_names: tuple[str, ...] = ()
    reads_head = True  # the dense loss proposes with the head (perception.losses.task_losses)

    def __init__(self, matcher: nn.Module, focal_alpha: float = 0.25, focal_gamma: float = 2.0,
                 dense_weight: float = 1.0, dense_class_positives: str = "all"):
        """``dense_weight``: weight of the dense one-to-many losses (0: off), added to the same loss names;
        ``dense_class_positives``: "all" or "one" (``dense_class_loss``)."""
        super().__init__()
        if dense_class_positives not in ("all", "one"):
            raise ValueError(f"dense_class_positives must be 'all' or 'one', got {dense_class_positives!r}")
        self.matcher = matcher
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma
        self.dense_weight, self.dense_class_positives = dense_weight, dense_class_positives

    def encode(self, per_image: list[dict], input_size: tuple[int, int], outputs: dict, device) -> list[dict]:
        raise NotImplementedError

    def prefix_losses(self, pred: dict[str, torch.Tensor], targets: list[dict],
                      num_targets: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def class_loss(self, logits: torch.Tensor, batch_index: torch.Tensor, query_index: torch.Tensor,
                   labels: torch.Tensor, num_targets: int) -> torch.Tensor:
        """Sigmoid focal loss: matched queries towards their class, every other query towards nothing."""
        target_classes = torch.zeros_like(logits)
        target_classes[batch_index, query_index, labels] = 1.0
        return sigmoid_focal_loss(logits, target_classes, self.focal_alpha, self.focal_gamma,
                                  reduction="sum") / num_targets

    def forward(self, outputs: dict[str, torch.Tensor], targets: dict,
                head: nn.Module | None = None) -> dict[str, torch.Tensor]:
        """``head``: the head that made ``outputs``; the dense loss (training outputs ``<task>.dense.*``) calls its
        ``propose`` for the tokens it reads."""
        logits = outputs[f"{self.task}.logits"]
        valid = targets[self.task]["valid"].to(logits.device)
        zero = zero_touching(outputs, self.task)
        bad = non_finite_outputs(outputs, self.task)
        if bad:
            LOGGER.warning("%s head: non-finite outputs %s; its losses are NaN for this step (not matched)",
                           self.task, bad[:4])
            nan = torch.full((), float("nan"), device=logits.device)
            return {name: nan for name in self.loss_names}
        if not bool(valid.any()):
            return {name: zero for name in self.loss_names}
        per_image = [t for t, v in zip(targets[self.task]["per_image"], valid.tolist()) if v]
        encoded = self.encode(per_image, targets[self.task]["input_size"], outputs, logits.device)
        num_targets = max(sum(len(t["labels"]) for t in encoded), 1)
        totals = {name: zero for name in self.loss_names}
        for prefix in output_prefixes(outputs, self.task):
            for name, value in self.prefix_losses(outputs_of(outputs, prefix, valid), encoded, num_targets).items():
                totals[name] = totals[name] + value
        if f"{self.task}.dn.index" in outputs:
            for name, value in self.denoising_losses(outputs, encoded, valid).items():
                totals[name] = totals[name] + value
        if self.dense_weight > 0 and f"{self.task}.dense.logits" in outputs:
            if head is None:
                raise ValueError(f"the {self.task} criterion's dense loss proposes with the head's `propose`: call it "
                                 f"as criterion(outputs, targets, head=model.heads[{self.task!r}])")
            dense = outputs_of(outputs, f"{self.task}.dense", valid)
            for name, value in self.dense_losses(dense, encoded, targets[self.task]["input_size"],
                                                 head.propose).items():
                totals[name] = totals[name] + self.dense_weight * value
        return totals

    def dense_losses(self, pred: dict[str, torch.Tensor], targets: list[dict], input_size: tuple[int, int],
                     propose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """One-to-many losses over every token (perception.losses.dense_assign). ``pred``: logits [B,N,C],
        features [B,N,D], anchors [B,N,4] of the labelled images; ``propose(features [1,K,D], anchors [1,K,4])``
        -> [1,K,G]: the head's proposals of the tokens the loss reads."""
        raise NotImplementedError

    def denoising_losses(self, outputs: dict[str, torch.Tensor], targets: list[dict],
                         valid: torch.Tensor) -> dict[str, torch.Tensor]:
        """Losses of the denoising queries (perception.models.heads.denoising), one set per decoder layer."""
        raise NotImplementedError

    def dense_class_loss(self, logits: torch.Tensor, assigned: torch.Tensor, quality: torch.Tensor,
                         targets: list[dict]) -> torch.Tensor:
        """Focal loss over all tokens: logits [B,N,C], assigned [B,N] target index or -1, quality [B,N].

        ``dense_class_positives`` "all": every assigned token is a class positive; "one": only the
        best token of each object is, its other positives are left out of the class loss (they still
        regress), so query selection picks one token per object.
        """
        positive = assigned >= 0
        weight = torch.ones_like(logits[..., :1])
        if self.dense_class_positives == "one":
            best = best_of_each(assigned, quality)
            weight[positive & ~best] = 0.0
            positive = best
        target_classes = torch.zeros_like(logits)
        batch_index, token_index, flat = assigned_pairs(positive, assigned, targets)
        target_classes[batch_index, token_index, torch.cat([t["labels"] for t in targets])[flat]] = 1.0
        num_positive = max(len(batch_index), 1)
        loss = sigmoid_focal_loss(logits, target_classes, self.focal_alpha, self.focal_gamma, reduction="none")
        return (loss * weight).sum() / num_positive


def paired_box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU [K] of cxcywh box pairs a[k], b[k] (normalised coordinates)."""
    a, b = box_convert(a, "cxcywh", "xyxy"), box_convert(b, "cxcywh", "xyxy")
    wh = (torch.minimum(a[:, 2:], b[:, 2:]) - torch.maximum(a[:, :2], b[:, :2])).clamp(min=0)
    intersection = wh[:, 0] * wh[:, 1]
    area = lambda boxes: (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    return intersection / (area(a) + area(b) - intersection).clamp(min=1e-9)


def queries_overlapping(targets: list[dict], overlap, threshold: float, device):
    """(image index [K], query index [K], label [K], target index in its image [K]) of every query whose overlap
    with a target of its image, ``overlap(i, target)`` -> [Q, M], reaches ``threshold``, labelled as the target it
    overlaps most."""
    found = []
    for i, target in enumerate(targets):
        if len(target["labels"]) == 0:
            continue
        best, nearest = overlap(i, target).max(dim=1)
        queries = torch.nonzero(best >= threshold).squeeze(1)
        found.append((torch.full_like(queries, i), queries, target["labels"][nearest[queries]], nearest[queries]))
    if not found:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty, empty, empty
    return tuple(torch.cat(parts) for parts in zip(*found))


def gather_pairs(targets: list[dict], image_index: torch.Tensor, target_index: torch.Tensor) -> dict:
    """{key: [K,...]}: target ``target_index[k]`` of image ``image_index[k]``, for every key of the targets."""
    flat = flat_target_index(targets, image_index, target_index)
    return {k: torch.cat([t[k] for t in targets])[flat] for k in targets[0]}


def add_one_to_many(losses: dict[str, torch.Tensor], many: dict[str, torch.Tensor], weight: float) -> None:
    """Adds ``weight`` x each one-to-many regression loss of ``many`` to the one-to-one loss of the same name in
    ``losses`` (in place; a name the one-to-one losses lack is left out)."""
    for name, value in many.items():
        if name in losses:
            losses[name] = losses[name] + weight * value


def overlapping_queries(boxes: torch.Tensor, targets: list[dict], threshold: float):
    """(image index [K], query index [K], label [K], object index in its image [K]) of every query whose box
    (cxcywh [B,Q,4]) overlaps an object of its image by IoU >= ``threshold``, labelled as the object it overlaps
    most."""
    boxes = boxes.detach().float()
    return queries_overlapping(targets, lambda i, target: box_iou(
        box_convert(boxes[i], "cxcywh", "xyxy"), box_convert(target["boxes"].float(), "cxcywh", "xyxy")),
        threshold, boxes.device)


class BoxSetCriterion(SetCriterion):
    """2D boxes: focal class loss (or IoU-aware, ``iou_aware``), L1 + GIoU; subclasses add per-query
    terms (``extra_losses``)."""

    loss_prefix = ""
    VARIFOCAL_ALPHA, VARIFOCAL_GAMMA = 0.75, 2.0  # RT-DETR's values

    def __init__(self, matcher: HungarianMatcher | None = None, focal_alpha: float = 0.25, focal_gamma: float = 2.0,
                 dense_weight: float = 1.0, dense_class_positives: str = "all", iou_aware: bool = False,
                 one_to_many_iou: float | None = None, one_to_many_regression: float = 0.0):
        """``iou_aware``: a matched query's class target is the IoU of its box with the object's (varifocal
        loss, RT-DETR), so the score ranks queries by how well they localise, not only by what they see.
        ``one_to_many_iou``: every query whose box overlaps an object by at least this IoU is a class positive
        too, not only the Hungarian match (DETA's IoU assignment); box and other losses stay one-to-one.
        Duplicates are then left to post-processing (``postprocess.obstacle_nms_iou`` and the BEV merge).
        ``one_to_many_regression``: with ``one_to_many_iou``, those queries also regress the object they overlap
        (box and the subclass's terms: depth, size, ... for obstacles), averaged over them and added at this weight
        to the one-to-one losses (H-DETR's one-to-many branch, on the same queries): more regression pairs per
        step for the heads whose score NMS picks among duplicates. 0: off."""
        super().__init__(matcher or HungarianMatcher(), focal_alpha, focal_gamma, dense_weight, dense_class_positives)
        if iou_aware and one_to_many_iou is not None:
            raise ValueError("iou_aware and one_to_many_iou are alternatives: set one of them")
        if one_to_many_regression and one_to_many_iou is None:
            raise ValueError("one_to_many_regression regresses the one-to-many queries: set one_to_many_iou too")
        self.iou_aware, self.one_to_many_iou = iou_aware, one_to_many_iou
        self.one_to_many_regression = one_to_many_regression

    def varifocal_loss(self, logits: torch.Tensor, batch_index: torch.Tensor, query_index: torch.Tensor,
                       labels: torch.Tensor, iou: torch.Tensor, num_targets: int) -> torch.Tensor:
        """BCE towards IoU on the matched (query, class), towards 0 elsewhere; negatives weighted
        alpha * p^gamma as in focal loss, positives by their IoU."""
        positive = torch.zeros_like(logits)
        positive[batch_index, query_index, labels] = 1.0
        target = torch.zeros_like(logits)
        target[batch_index, query_index, labels] = iou.detach().clamp(min=0.0).to(logits.dtype)
        score = logits.sigmoid().detach()
        weight = self.VARIFOCAL_ALPHA * score.pow(self.VARIFOCAL_GAMMA) * (1 - positive) + target
        return F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum") / num_targets

    def encode_targets(self, per_image: list[dict], input_size: tuple[int, int], device) -> list[dict]:
        """Dataset targets (xyxy input-image pixels) -> labels and normalised cxcywh boxes."""
        height, width = input_size
        scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=device)
        return [{"labels": t["labels"].long().to(device),
                 "boxes": box_convert(t["boxes_xyxy"].float().to(device) / scale, "xyxy", "cxcywh")}
                for t in per_image]

    def encode(self, per_image: list[dict], input_size: tuple[int, int], outputs: dict, device) -> list[dict]:
        return self.encode_targets(per_image, input_size, device)

    def prefix_losses(self, pred: dict[str, torch.Tensor], targets: list[dict],
                      num_targets: int) -> dict[str, torch.Tensor]:
        matches = self.matcher(pred["logits"], pred["boxes"], targets)
        batch_index, query_index, matched = gather_matched(matches, targets)
        p = self.loss_prefix
        extra = None
        if self.iou_aware:
            boxes = pred["boxes"][batch_index, query_index]
            losses = {f"{p}_cls": self.varifocal_loss(pred["logits"], batch_index, query_index, matched["labels"],
                                                      paired_box_iou(boxes, matched["boxes"]), num_targets)}
        elif self.one_to_many_iou is not None:
            # One-to-one matches plus every query on an object: a duplicate of a matched query is not
            # taught "nothing here", which left the scores flat (AUROC 0.61 of queries on objects vs off).
            extra = overlapping_queries(pred["boxes"], targets, self.one_to_many_iou)
            losses = {f"{p}_cls": self.class_loss(pred["logits"], torch.cat([batch_index, extra[0]]),
                                                  torch.cat([query_index, extra[1]]),
                                                  torch.cat([matched["labels"], extra[2]]), num_targets)}
        else:
            losses = {f"{p}_cls": self.class_loss(pred["logits"], batch_index, query_index, matched["labels"],
                                                  num_targets)}
        losses |= self.paired_losses(pred, matched, batch_index, query_index, num_targets)
        if extra is not None and self.one_to_many_regression and len(extra[0]):
            add_one_to_many(losses, self.paired_losses(pred, gather_pairs(targets, extra[0], extra[3]), extra[0],
                                                       extra[1], len(extra[0])), self.one_to_many_regression)
        return losses

    def paired_losses(self, pred, matched, batch_index, query_index, num_targets) -> dict[str, torch.Tensor]:
        """L1 + GIoU and the subclass's terms (``extra_losses``) of query ``query_index[k]`` of image
        ``batch_index[k]`` against target k of ``matched``."""
        p = self.loss_prefix
        boxes = pred["boxes"][batch_index, query_index]
        losses = {f"{p}_l1": F.l1_loss(boxes, matched["boxes"], reduction="sum") / num_targets,
                  f"{p}_giou": generalized_box_iou_loss(
                      box_convert(boxes, "cxcywh", "xyxy"), box_convert(matched["boxes"], "cxcywh", "xyxy"),
                      reduction="sum") / num_targets}
        return losses | self.extra_losses(pred, matched, batch_index, query_index, num_targets)

    def denoising_targets(self, targets: dict, device) -> list[dict]:
        """The head's denoising input: per image of the batch, labels [M] and boxes [M,4] cxcywh in [0, 1]
        (none for an image without the task's labels), in the order ``encode`` gives them."""
        task = targets[self.task]
        encoded = self.encode_targets(task["per_image"], task["input_size"], device)
        return [t if ok else {"labels": t["labels"][:0], "boxes": t["boxes"][:0]}
                for t, ok in zip(encoded, task["valid"].tolist())]

    def denoising_losses(self, outputs: dict[str, torch.Tensor], targets: list[dict],
                         valid: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each denoising query against the object it was made from (no matching): focal class loss over all
        of them (padding towards nothing), box and extra terms on the real ones, per layer; normalised by the
        number of real denoising queries."""
        index = outputs[f"{self.task}.dn.index"][valid]  # (B', K): each query's object in its image, -1 padding
        batch_index, query_index, flat = assigned_pairs(index >= 0, index, targets)
        matched = {key: torch.cat([t[key] for t in targets])[flat] for key in targets[0]}
        num = max(len(batch_index), 1)
        layers = sorted({k.split(".")[1] for k in outputs if k.startswith(f"{self.task}.dn") and
                         not k.startswith(f"{self.task}.dn.")})
        totals: dict[str, torch.Tensor] = {}
        for layer in layers:
            pred = outputs_of(outputs, f"{self.task}.{layer}", valid)
            losses = {f"{self.loss_prefix}_cls": self.class_loss(pred["logits"], batch_index, query_index,
                                                                matched["labels"], num)}
            for name, value in (losses | self.paired_losses(pred, matched, batch_index, query_index, num)).items():
                totals[name] = totals.get(name, 0.0) + value
        return totals

    def extra_losses(self, pred, matched, batch_index, query_index, num_targets) -> dict[str, torch.Tensor]:
        """Losses on per-query outputs beyond class and box (none here)."""
        return {}

    def dense_losses(self, pred: dict[str, torch.Tensor], targets: list[dict], input_size: tuple[int, int],
                     propose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """ATSS positives of every token: focal class loss over all tokens, L1 + GIoU on the positives (their
        boxes proposed here, for the positives alone: the assignment reads only the anchors)."""
        anchors = pred["anchors"][0]  # (N, 4), the same for every image
        sizes = level_sizes(anchors)
        aspect = input_size[1] / input_size[0]  # distances measured in the image's shape
        assigned, quality = (torch.stack(v) for v in zip(*[atss_assign(anchors, sizes, t["boxes"], aspect)
                                                             for t in targets]))  # (B, N) each
        p = self.loss_prefix
        losses = {f"{p}_cls": self.dense_class_loss(pred["logits"], assigned, quality, targets)}
        batch_index, token_index, flat = assigned_pairs(assigned >= 0, assigned, targets)
        num_positive = max(len(batch_index), 1)
        target_boxes = torch.cat([t["boxes"] for t in targets])[flat]
        boxes = propose(pred["features"][batch_index, token_index][None],
                        pred["anchors"][batch_index, token_index][None])[0]  # (K, 4) cxcywh
        losses[f"{p}_l1"] = F.l1_loss(boxes, target_boxes, reduction="sum") / num_positive
        losses[f"{p}_giou"] = generalized_box_iou_loss(
            box_convert(boxes, "cxcywh", "xyxy"), box_convert(target_boxes, "cxcywh", "xyxy"),
            reduction="sum") / num_positive
        return losses | self.dense_extra_losses(pred, targets, batch_index, token_index, flat, num_positive)

    def dense_extra_losses(self, pred: dict[str, torch.Tensor], targets: list[dict], batch_index: torch.Tensor,
                           token_index: torch.Tensor, flat: torch.Tensor, num_positive: int) -> dict[str, torch.Tensor]:
        """Losses on the head's other per-token outputs (``dense_extras``) at the ATSS positives: image and token
        index [K] of each positive, ``flat`` [K] its object's index in the targets concatenated over images."""
        return {}


class LightCriterion(BoxSetCriterion):
    """Traffic lights: the class is the light's state (perception.models.heads.lights.LIGHT_STATES)."""

    task = "lights"
    loss_prefix = "light"
    loss_names = ("light_cls", "light_l1", "light_giou")
