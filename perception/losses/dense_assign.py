"""One-to-many assignment of memory tokens to ground truth, for the dense auxiliary losses.

The DETR heads start their queries from the top-k tokens of a per-token score (query
selection). Supervising only the selected tokens leaves the score untrained where it matters:
at random initialisation the selected tokens are arbitrary, so the score never learns to find
objects (measured: tokens inside objects ranked at chance, AUROC 0.53). Here every token gets a
class target: a few tokens per object are positive, the rest negative (Co-DETR's auxiliary
one-to-many supervision, with ATSS's assigner for boxes).

Boxes, ATSS (Zhang et al. 2020): per FPN level the ``k`` anchors nearest to the object's centre
are candidates; those whose IoU with the object reaches the candidates' mean + std and whose
centre lies inside the object are positive; the nearest candidate always is (objects smaller
than a cell). A token claimed by two objects goes to the one it overlaps more.

Lanes: tokens within ``radius`` cells of the lane (horizontally, on a row the lane crosses) are
candidates; the ``k`` whose current proposal fits the lane best are positive (SimOTA-style
dynamic choice inside a geometric prior).
"""

from __future__ import annotations

import torch
from torchvision.ops import box_convert, box_iou


def level_sizes(anchors: torch.Tensor) -> list[int]:
    """Tokens per level [L] of anchors [N,4] laid out level by level (each level has its own anchor size)."""
    return torch.unique_consecutive(anchors[:, 2], return_counts=True)[1].tolist()


@torch.no_grad()
def atss_assign(anchors: torch.Tensor, sizes: list[int], gt_boxes: torch.Tensor, aspect: float,
                k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(object index per token [N] (-1: negative), quality [N] of each assignment, higher = better).

    anchors [N,4] cxcywh normalised, tokens ordered level by level (``sizes[l]`` tokens in level l);
    gt_boxes [M,4] cxcywh normalised; ``aspect`` = input width / height (distances in pixels' shape).
    """
    n, m = anchors.shape[0], gt_boxes.shape[0]
    assigned = torch.full((n,), -1, dtype=torch.int64, device=anchors.device)
    if m == 0:
        return assigned, torch.zeros(n, device=anchors.device)
    scale = torch.tensor([aspect, 1.0], device=anchors.device)
    distance = torch.cdist(anchors[:, :2] * scale, gt_boxes[:, :2] * scale)  # (N, M)
    candidates, nearest = [], []
    start = 0
    for size in sizes:
        top = distance[start:start + size].topk(min(k, size), dim=0, largest=False).indices + start  # (k, M)
        candidates.append(top)
        nearest.append(top[:1])
        start += size
    candidates = torch.cat(candidates)  # (L*k, M)
    anchor_xyxy = box_convert(anchors, "cxcywh", "xyxy")
    gt_xyxy = box_convert(gt_boxes, "cxcywh", "xyxy")
    iou = box_iou(anchor_xyxy, gt_xyxy)  # (N, M)
    candidate_iou = iou.gather(0, candidates)  # (L*k, M)
    threshold = candidate_iou.mean(0) + candidate_iou.std(0, unbiased=False)  # (M,)
    centre = anchors[candidates, :2]  # (L*k, M, 2)
    inside = ((centre > gt_xyxy[None, :, :2]) & (centre < gt_xyxy[None, :, 2:])).all(-1)
    positive = (candidate_iou >= threshold[None]) & inside
    # The single nearest token of the whole pyramid is always positive: tiny objects fall between centres.
    objects = torch.arange(m, device=anchors.device)
    best_level = torch.stack([distance[t[0], objects] for t in nearest]).argmin(0)  # (M,)
    always = torch.stack(nearest)[best_level, 0, objects]  # (M,)
    claim = torch.full((n, m), -1.0, device=anchors.device)  # IoU of each positive (token, object)
    token = candidates[positive]
    obj = torch.nonzero(positive, as_tuple=True)[1]
    claim[token, obj] = iou[token, obj]
    claim[always, objects] = iou[always, objects].clamp(min=0.0) + 1.0  # wins any tie
    best, index = claim.max(dim=1)
    assigned[best >= 0] = index[best >= 0]
    return assigned, best


def token_cell_widths(anchors: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """[N] each token's cell width (normalised: 1 / its level's width) of anchors [N,4] laid out level by level.
    The same for every image of a batch: compute it once per batch (``unique`` waits for the device)."""
    cell = torch.ones(anchors.shape[0], device=anchors.device)
    start = 0
    for size in sizes:
        ys = anchors[start:start + size, 1].unique()
        cell[start:start + size] = 1.0 / max(size // len(ys), 1)
        start += size
    return cell


@torch.no_grad()
def lane_candidates(anchors: torch.Tensor, sizes: list[int], gt_points: torch.Tensor, gt_visible: torch.Tensor,
                    radius: float = 1.5, cell: torch.Tensor | None = None, row_top: float = 0.0) -> torch.Tensor:
    """[N,M] bool: token n lies within ``radius`` cells of lane m, on an anchor row the lane crosses (anchors
    [N,4] cxcywh normalised, cell size from the level: w = 1 / level width; gt_points [M,P], gt_visible [M,P];
    ``cell``: token_cell_widths when the caller has them; ``row_top``: where the anchor rows start,
    perception.core.lane_coding). A token above the first row is on no row."""
    num_rows = gt_points.shape[1]
    position = (anchors[:, 1] - row_top) / (1.0 - row_top) * num_rows  # (N,) in row spacings from the first
    row = position.long().clamp(0, num_rows - 1)  # (N,): the anchor row nearest each token
    cell = token_cell_widths(anchors, sizes) if cell is None else cell
    lane_x = gt_points[:, row].T  # (N, M)
    on_row = gt_visible[:, row].T & (position >= 0)[:, None]  # (N, M)
    return on_row & ((anchors[:, :1] - lane_x).abs() <= radius * cell[:, None])


@torch.no_grad()
def lane_assign(anchors: torch.Tensor, sizes: list[int], proposals: torch.Tensor, gt_points: torch.Tensor,
                gt_visible: torch.Tensor, k: int = 4, radius: float = 1.5,
                near: torch.Tensor | None = None, row_top: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(lane index per token [N] (-1: negative), quality [N]: minus the proposal's fit cost).

    anchors [N,4] cxcywh normalised (cell size from the level: w = 1 / level width); proposals [N,P]
    the tokens' proposed x per row (normalised; only the ``lane_candidates`` tokens' are read); gt_points [M,P]
    x per row, gt_visible [M,P] bool; ``near``: ``lane_candidates`` [N,M] when the caller has them (else found
    here, with the anchor rows from ``row_top``).
    """
    n, m = anchors.shape[0], gt_points.shape[0]
    assigned = torch.full((n,), -1, dtype=torch.int64, device=anchors.device)
    if m == 0:
        return assigned, torch.zeros(n, device=anchors.device)
    if near is None:
        near = lane_candidates(anchors, sizes, gt_points, gt_visible, radius, row_top=row_top)  # (N, M)
    fit = (proposals[:, None] - gt_points[None]).abs()  # (N, M, P)
    visible = gt_visible.float()[None]
    cost = (fit * visible).sum(-1) / visible.sum(-1).clamp(min=1)  # (N, M)
    cost = torch.where(near, cost, torch.full_like(cost, float("inf")))
    claim = torch.full((n, m), float("inf"), device=anchors.device)
    counts = near.sum(0).tolist()  # (M,): one read on the host for all lanes, not one per lane
    for j, count in enumerate(counts):
        if count == 0:
            continue
        top = cost[:, j].topk(min(k, count), largest=False).indices
        claim[top, j] = cost[top, j]
    best, index = claim.min(dim=1)
    keep = torch.isfinite(best)
    assigned[keep] = index[keep]
    return assigned, torch.where(keep, -best, torch.zeros_like(best))


def best_of_each(assigned: torch.Tensor, quality: torch.Tensor) -> torch.Tensor:
    """[B,N] bool: per image, the one best-quality token of each object among its positives.

    Used as the only class positive when ``dense_class_positives == "one"``: query selection takes
    the top-k tokens by class score, and several positives per object fill the k queries with
    duplicates of the same object.
    """
    # Vectorised over images and objects (a loop per object waits for the device once per object): each
    # (image, object) pair's highest quality, then the lowest token index reaching it (argmax's first maximum).
    batch, tokens = assigned.shape
    best = torch.zeros_like(assigned, dtype=torch.bool)
    image, token = torch.nonzero(assigned >= 0, as_tuple=True)  # the positives
    if len(token) == 0:
        return best
    width = int(assigned.max()) + 1  # objects per image, at most
    key = image * width + assigned[image, token]  # one key per (image, object)
    score = quality[image, token]
    top = torch.full((batch * width,), float("-inf"), dtype=score.dtype, device=score.device)
    top = top.scatter_reduce(0, key, score, "amax")
    reaching = score == top[key]
    first = torch.full((batch * width,), tokens, dtype=token.dtype, device=token.device)
    first = first.scatter_reduce(0, key[reaching], token[reaching], "amin")
    chosen = first < tokens  # the keys that had positives
    best[torch.arange(batch * width, device=key.device)[chosen] // width, first[chosen]] = True
    return best
