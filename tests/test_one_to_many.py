"""One-to-many class targets for the box heads (matcher.obstacle_one_to_many_iou, matcher.light_one_to_many_iou;
DETA's IoU assignment): a duplicate query on an object is a class positive, not taught "nothing here"; box losses
stay one-to-one. The duplicates this leaves are removed by the per-class 2D NMS of post-processing."""

from __future__ import annotations

import numpy as np
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
    image, query, label, _ = overlapping_queries(BOXES, targets, 0.6)
    assert image.tolist() == [0, 0, 0] and query.tolist() == [0, 1, 2] and label.tolist() == [2, 2, 0]
    image, query, label, _ = overlapping_queries(BOXES, targets, 0.9)
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


@pytest.mark.parametrize("head", ["obstacle", "light"])
def test_config_rejects_a_bad_threshold_and_the_conflict_with_iou_aware(head):
    from conftest import experiment_dict

    from perception.config import parse_config

    key = f"{head}_one_to_many_iou"
    with pytest.raises(ConfigError, match=f"matcher.{key}"):
        parse_config(experiment_dict("unused", matcher={key: 1.5}))
    with pytest.raises(ConfigError, match="alternatives"):
        parse_config(experiment_dict("unused", matcher={key: 0.6, "iou_aware_classification": True}))
    with pytest.raises(ConfigError, match=f"postprocess.{head}_nms_iou"):
        parse_config(experiment_dict("unused", postprocess={f"{head}_nms_iou": 0.0}))


def test_the_light_criterion_is_built_one_to_many_from_the_config():
    from conftest import experiment_dict

    from perception.config import parse_config
    from perception.tasks.lights import LIGHTS

    cfg = parse_config(experiment_dict("unused", matcher=dict(light_one_to_many_iou=0.5)))
    assert LIGHTS.build_criterion(cfg).one_to_many_iou == 0.5
    assert LIGHTS.build_criterion(parse_config(experiment_dict("unused"))).one_to_many_iou is None


def test_light_nms_drops_same_state_duplicates_only():
    from perception.postprocess.lights import decode_lights

    logits = torch.full((1, 4, 4), -8.0)
    # Queries 0 and 1: one red light twice (IoU 0.83); query 2: green on the same spot; query 3: red elsewhere.
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.52, 0.5, 0.22, 0.2], [0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]]])
    for query, label, logit in ((0, 1, 3.0), (1, 1, 2.0), (2, 0, 1.0), (3, 1, 0.5)):
        logits[0, query, label] = logit
    outputs = {"lights.logits": logits, "lights.boxes": boxes}
    identity = np.eye(3)
    free = decode_lights(outputs, 0, (100, 200), identity, 10, 0.3)
    assert free["labels"].tolist() == [1, 1, 0, 1]  # NMS-free: the duplicate stays
    kept = decode_lights(outputs, 0, (100, 200), identity, 10, 0.3, nms_iou=0.5)
    assert kept["labels"].tolist() == [1, 0, 1]
    assert np.allclose(kept["scores"], torch.sigmoid(torch.tensor([3.0, 1.0, 0.5])).numpy())
    assert np.allclose(kept["boxes_xyxy"][0], [80.0, 40.0, 120.0, 60.0])  # input px through the affine


def test_overlapping_queries_name_the_object_each_overlaps():
    targets = [{"labels": torch.tensor([2, 0]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]])}]
    _, query, _, target = overlapping_queries(BOXES, targets, 0.6)
    assert query.tolist() == [0, 1, 2] and target.tolist() == [0, 0, 1]


def _obstacle_outputs(depth_codes: list[float]) -> dict[str, torch.Tensor]:
    """Three queries on head_export.one_obstacle's image: 0 on the car's box, 1 a near duplicate (IoU 0.89), 2 off
    it; ``depth_codes`` their depths (the car's code is encode_depth(12 m, fx 50))."""
    boxes = torch.tensor([[[0.3125, 0.5, 0.3125, 0.5], [0.33, 0.5, 0.3125, 0.5], [0.85, 0.15, 0.1, 0.1]]])
    logits = torch.full((1, 3, 10), -4.0)
    logits[0, :2, 0] = 2.0
    return {"obstacles.logits": logits, "obstacles.boxes": boxes,
            "obstacles.center": boxes[..., :2].clone(), "obstacles.depth": torch.tensor([depth_codes]),
            "obstacles.size": torch.zeros(1, 3, 3), "obstacles.yaw": torch.zeros(1, 3, 2),
            "obstacles.velocity": torch.zeros(1, 3, 2), "obstacles.attribute": torch.zeros(1, 3, 8)}


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_one_to_many_regression_trains_a_duplicates_box_and_3d_terms_only_when_on(weight):
    from head_export import one_obstacle

    from perception.core.obstacle_coding import encode_depth
    from perception.losses.obstacle_loss import ObstacleCriterion

    truth = encode_depth(torch.tensor(12.0), torch.tensor(50.0)).item()
    outputs = {k: v.requires_grad_() for k, v in _obstacle_outputs([truth, truth + 0.5, truth + 0.5]).items()}
    criterion = ObstacleCriterion(dense_weight=0.0, one_to_many_iou=0.6, one_to_many_regression=weight)
    losses = criterion(outputs, one_obstacle(yaw=0.3))
    sum(losses.values()).backward()
    depth_grad, box_grad = outputs["obstacles.depth"].grad[0], outputs["obstacles.boxes"].grad[0]
    assert depth_grad[2] == 0 and box_grad[2].abs().sum() == 0  # off the car: never regressed
    if weight:  # the duplicate's depth is pulled down towards the car's, at the weight over the 2 one-to-many queries
        assert depth_grad[1].item() == pytest.approx(weight / 2)
        assert box_grad[1].abs().sum() > 0
    else:  # one-to-one: only the Hungarian match regresses
        assert depth_grad[1] == 0 and box_grad[1].abs().sum() == 0
    # The match's own depth is exact: the L1's subgradient at 0 is 0 either way, so its losses are unchanged.
    assert losses["obstacle_depth"].item() == pytest.approx(weight * 0.5 / 2)


def test_one_to_many_regression_needs_one_to_many_and_a_weight():
    from conftest import experiment_dict

    from perception.config import parse_config
    from perception.losses.obstacle_loss import ObstacleCriterion
    from perception.tasks.obstacles import OBSTACLES

    with pytest.raises(ConfigError, match="set matcher.obstacle_one_to_many_iou too"):
        parse_config(experiment_dict("unused", matcher={"obstacle_one_to_many_regression": 1.0}))
    with pytest.raises(ConfigError, match="obstacle_one_to_many_regression must be a weight >= 0"):
        parse_config(experiment_dict("unused", matcher={"obstacle_one_to_many_iou": 0.6,
                                                        "obstacle_one_to_many_regression": -1.0}))
    with pytest.raises(ValueError, match="set one_to_many_iou too"):
        ObstacleCriterion(one_to_many_regression=1.0)
    cfg = parse_config(experiment_dict("unused", matcher={"obstacle_one_to_many_iou": 0.6,
                                                          "obstacle_one_to_many_regression": 0.5}))
    assert OBSTACLES.build_criterion(cfg).one_to_many_regression == 0.5
