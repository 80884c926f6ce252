"""IoU-aware classification (matcher.iou_aware_classification): the class target of a matched query is
its box IoU, so the loss is lowest where the score equals the IoU; unmatched queries go towards 0."""

from __future__ import annotations

import torch
from torchvision.ops import box_convert, box_iou

from perception.losses.box_set_loss import LightCriterion, paired_box_iou


def test_paired_box_iou_is_the_diagonal_of_torchvision_box_iou():
    torch.manual_seed(0)
    a, b = torch.rand(6, 4) * 0.4 + 0.1, torch.rand(6, 4) * 0.4 + 0.1
    expected = box_iou(box_convert(a, "cxcywh", "xyxy"), box_convert(b, "cxcywh", "xyxy")).diagonal()
    assert torch.allclose(paired_box_iou(a, b), expected, atol=1e-6)


def test_varifocal_loss_is_lowest_where_the_score_equals_the_iou():
    criterion = LightCriterion(iou_aware=True)
    logits = torch.linspace(-4, 4, 161)
    losses = []
    for value in logits:
        matched = torch.full((1, 2, 4), -8.0)
        matched[0, 0, 1] = value
        losses.append(criterion.varifocal_loss(matched, torch.tensor([0]), torch.tensor([0]), torch.tensor([1]),
                                               torch.tensor([0.7]), 1))
    best = logits[int(torch.stack(losses).argmin())]
    assert abs(float(torch.sigmoid(best)) - 0.7) < 0.02


def test_iou_aware_criterion_trains_the_unmatched_queries_towards_nothing():
    criterion = LightCriterion(iou_aware=True, dense_weight=0.0)
    logits = torch.zeros(1, 3, 4, requires_grad=True)
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.2, 0.2, 0.1, 0.1], [0.8, 0.8, 0.1, 0.1]]])
    targets = {"lights": {"valid": torch.tensor([True]), "input_size": (100, 100), "per_image": [
        {"boxes_xyxy": torch.tensor([[40.0, 40.0, 60.0, 60.0]]), "labels": torch.tensor([2])}]}}
    losses = criterion({"lights.logits": logits, "lights.boxes": boxes}, targets)
    losses["light_cls"].backward()
    grad = logits.grad[0]
    assert grad[0, 2] < 0  # the matched query (IoU 1) is pushed up on its class
    assert (grad[1:] > 0).all() and (grad[0, [0, 1, 3]] > 0).all()  # everything else down
