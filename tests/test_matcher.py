"""Hungarian matcher: batched equals per-image, empty targets, permutation invariance; the host assignment."""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment

from perception.losses.matcher import HungarianMatcher, solve_assignments


def _targets(sizes, generator):
    targets = []
    for n in sizes:
        centre = torch.rand(n, 2, generator=generator) * 0.8 + 0.1
        size = torch.rand(n, 2, generator=generator) * 0.1 + 0.02
        targets.append({"labels": torch.randint(0, 10, (n,), generator=generator),
                        "boxes": torch.cat([centre, size], dim=1)})
    return targets


def test_batched_matching_equals_per_image_matching():
    g = torch.Generator().manual_seed(0)
    logits, boxes = torch.randn(3, 20, 10, generator=g), torch.rand(3, 20, 4, generator=g) * 0.5 + 0.1
    targets = _targets([4, 0, 7], g)
    matcher = HungarianMatcher()
    batched = matcher(logits, boxes, targets)
    for i, target in enumerate(targets):
        (rows, cols), = matcher(logits[i:i + 1], boxes[i:i + 1], [target])
        assert torch.equal(batched[i][0], rows) and torch.equal(batched[i][1], cols)
    assert [len(r) for r, _ in batched] == [4, 0, 7]


def test_all_empty_targets():
    matches = HungarianMatcher()(torch.randn(2, 5, 10), torch.rand(2, 5, 4), _targets([0, 0], torch.Generator()))
    assert all(len(r) == 0 and len(c) == 0 for r, c in matches)


def test_permuting_queries_permutes_the_assignment():
    g = torch.Generator().manual_seed(1)
    logits, boxes = torch.randn(1, 12, 10, generator=g), torch.rand(1, 12, 4, generator=g) * 0.5 + 0.1
    targets = _targets([5], g)
    matcher = HungarianMatcher()
    (rows, cols), = matcher(logits, boxes, targets)
    permutation = torch.randperm(12, generator=g)
    (rows_p, cols_p), = matcher(logits[:, permutation], boxes[:, permutation], targets)
    original = dict(zip(cols.tolist(), rows.tolist()))
    permuted = dict(zip(cols_p.tolist(), permutation[rows_p].tolist()))
    assert original == permuted  # the same query is matched to the same box


def test_exact_predictions_are_matched_to_their_targets():
    g = torch.Generator().manual_seed(2)
    targets = _targets([6], g)
    boxes = torch.rand(1, 10, 4, generator=g) * 0.3 + 0.1
    logits = torch.full((1, 10, 10), -5.0)
    slots = torch.tensor([7, 2, 9, 0, 4, 5])
    boxes[0, slots] = targets[0]["boxes"]
    logits[0, slots, targets[0]["labels"]] = 5.0
    (rows, cols), = HungarianMatcher()(logits, boxes, targets)
    assert torch.equal(slots[cols], rows)


def test_solve_assignments_solves_each_image_with_one_copy_each_way():
    """All images' costs go to the host at once; each image's assignment is scipy's on its own block, images
    without targets get empty indices, and the indices come back on the given device."""
    torch.manual_seed(0)
    blocks = [torch.rand(6, 3), torch.rand(6, 0), torch.rand(6, 6), torch.rand(6, 1)]
    pairs = solve_assignments(blocks, torch.device("cpu"))
    for block, (queries, targets) in zip(blocks, pairs):
        assert queries.dtype == targets.dtype == torch.int64 and len(queries) == min(block.shape)
        if block.numel():
            rows, cols = linear_sum_assignment(block.numpy())
            assert queries.tolist() == rows.tolist() and targets.tolist() == cols.tolist()
    empty = solve_assignments([torch.rand(4, 0)] * 2, torch.device("cpu"))
    assert all(len(q) == len(t) == 0 for q, t in empty)
    assert solve_assignments([], torch.device("cpu")) == []  # a batch without a labelled image
