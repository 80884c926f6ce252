"""One-to-many class targets for obstacles (matcher.obstacle_one_to_many_iou, DETA's IoU assignment): a
duplicate query on an object is a class positive, not taught "nothing here"; box losses stay one-to-one."""

from __future__ import annotations

import pytest
import torch

from perception.config import ConfigError
from perception.losses.box_set_loss import LightCriterion, overlapping_queries


def _targets():
    return {"lights": {"valid": torch.tensor([True]), "input_size": (100, 100), "per_image": [
        {"boxes_xyxy": torch.tensor([[40.0, 40.0, 60.0, 60.0]]), "labels": torch.tensor([2])}]}}


# Query 0 is the object's box, query 1 a near duplicate (IoU 0.83), query 2 background.
BOXES = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.52, 0.5, 0.22, 0.2], [0.1, 0.1, 0.1, 0.1]]])


def test_overlapping_queries_are_labelled_as_the_object_they_overlap_most():
    targets = [{"labels": torch.tensor([2, 0]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]])}]
    image, query, label = overlapping_queries(BOXES, targets, 0.6)
    assert image.tolist() == [0, 0, 0] and query.tolist() == [0, 1, 2] and label.tolist() == [2, 2, 0]
    image, query, label = overlapping_queries(BOXES, targets, 0.9)
    assert query.tolist() == [0, 2]


@pytest.mark.parametrize("one_to_many", [None, 0.6])
def test_a_duplicate_is_pushed_down_only_without_one_to_many(one_to_many):
    criterion = LightCriterion(dense_weight=0.0, one_to_many_iou=one_to_many)
    logits = torch.zeros(1, 3, 4, requires_grad=True)
    boxes = BOXES.clone().requires_grad_(True)
    losses = criterion({"lights.logits": logits, "lights.boxes": boxes}, _targets())
    (losses["light_cls"] + losses["light_l1"]).backward()
    grad = logits.grad[0]
    assert grad[0, 2] < 0 and grad[2, 2] > 0  # the match up, the background down
    assert (grad[1, 2] < 0) if one_to_many else (grad[1, 2] > 0)  # the duplicate: up only with one-to-many
    assert boxes.grad[0, 1].abs().sum() == 0  # its box is not regressed either way (one-to-one)


def test_config_rejects_a_bad_threshold_and_the_conflict_with_iou_aware():
    from conftest import experiment_dict

    from perception.config import parse_config

    with pytest.raises(ConfigError, match="obstacle_one_to_many_iou"):
        parse_config(experiment_dict("unused", matcher=dict(obstacle_one_to_many_iou=1.5)))
    with pytest.raises(ConfigError, match="alternatives"):
        parse_config(experiment_dict("unused", matcher=dict(obstacle_one_to_many_iou=0.6,
                                                            iou_aware_classification=True)))
