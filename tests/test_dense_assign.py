"""The dense one-to-many assigners: few positives per object, on the object, every object served;
and the dense outputs exist only in training (the exported graph never sees them)."""

from __future__ import annotations

import pytest
import torch

from perception.losses.dense_assign import atss_assign, best_of_each, lane_assign, level_sizes
from perception.models.heads.query_memory import TokenMemory


def _anchors(height=224, width=448, channels=8, levels=(1, 2, 3)):
    feats = [torch.zeros(1, channels, height // s, width // s) for s in (4, 8, 16, 32)]
    _, _, anchors, _ = TokenMemory(channels, 16, levels)(feats)
    return anchors[0]


def test_atss_gives_each_object_a_few_positives_inside_it():
    anchors = _anchors()
    boxes = torch.tensor([[0.3, 0.6, 0.2, 0.3], [0.8, 0.5, 0.02, 0.05], [0.5, 0.5, 0.6, 0.8]])  # cxcywh
    assigned, quality = atss_assign(anchors, level_sizes(anchors), boxes, aspect=2.0)
    assert level_sizes(anchors) == [28 * 56, 14 * 28, 7 * 14]
    for j in range(len(boxes)):
        positives = torch.nonzero(assigned == j).flatten()
        assert 1 <= len(positives) <= 9, (j, len(positives))
        centre = anchors[positives, :2]
        half = boxes[j, 2:] / 2 + 1.0 / 28  # inside, or the nearest cell for a box smaller than one
        assert ((centre - boxes[j, :2]).abs() <= half).all()
    assert (assigned == -1).sum() > 0.95 * len(anchors)
    best = best_of_each(assigned[None], quality[None])[0]
    assert best.sum() == len(boxes) and set(assigned[best].tolist()) == {0, 1, 2}


def test_atss_without_objects_assigns_nothing():
    anchors = _anchors()
    assert (atss_assign(anchors, level_sizes(anchors), torch.zeros(0, 4), 2.0)[0] == -1).all()


def test_lane_assign_picks_few_tokens_on_the_lane():
    anchors = _anchors()
    rows = 24
    lane_x = torch.linspace(0.45, 0.2, rows)  # bottom-left to the middle, normalised
    visible = torch.zeros(1, rows, dtype=torch.bool)
    visible[0, 8:] = True
    proposals = anchors[:, :1].expand(-1, rows).clone()
    assigned, _ = lane_assign(anchors, level_sizes(anchors), proposals, lane_x[None].flip(1), visible, k=4)
    positives = torch.nonzero(assigned == 0).flatten()
    assert 1 <= len(positives) <= 4
    row = (anchors[positives, 1] * rows).long()
    assert visible[0, row].all()
    assert ((anchors[positives, 0] - lane_x.flip(0)[row]).abs() <= 1.5 / 14 + 1e-6).all()


def test_dense_outputs_only_in_training_and_the_dense_loss_trains_every_token():
    from perception.losses.matcher import HungarianMatcher
    from perception.losses.obstacle_loss import ObstacleCriterion
    from perception.models.heads.obstacles import ObstacleHead

    torch.manual_seed(0)
    head = ObstacleHead(16, dim=32, num_queries=10, num_layers=1, ffn_dim=64)
    feats = [torch.randn(2, 16, 224 // s, 448 // s) for s in (4, 8, 16, 32)]
    assert not any(".dense." in k for k in head.eval()(feats))
    outputs = head.train()(feats)
    assert outputs["obstacles.dense.logits"].shape == (2, 28 * 56 + 14 * 28 + 7 * 14, 10)
    target = {"boxes_xyxy": torch.tensor([[100.0, 100.0, 160.0, 150.0]]), "labels": torch.tensor([2]),
              "center_uv": torch.tensor([[130.0, 125.0]]), "center_cam": torch.tensor([[0.0, 1.0, 20.0]]),
              "size_wlh": torch.tensor([[1.9, 4.5, 1.6]]), "yaw": torch.tensor([0.3]),
              "velocity": torch.zeros(1, 2), "attributes": torch.tensor([0]), "intrinsics": torch.eye(3) * 400}
    targets = {"obstacles": {"valid": torch.tensor([True, True]), "input_size": (224, 448),
                             "per_image": [target, target]}}
    with_dense = ObstacleCriterion(HungarianMatcher(), dense_weight=1.0)(outputs, targets, head=head)["obstacle_cls"]
    logits = outputs["obstacles.dense.logits"]
    grad, = torch.autograd.grad(with_dense, logits, retain_graph=True)
    assert (grad.abs().sum(-1) > 0).float().mean() > 0.99  # every token is told something
    without = ObstacleCriterion(HungarianMatcher(), dense_weight=0.0)(outputs, targets, head=head)["obstacle_cls"]
    grad_without, = torch.autograd.grad(without, logits, allow_unused=True)
    assert grad_without is None or (grad_without.abs().sum(-1) > 0).sum() <= 2 * 10  # the selected top-k only


def _dense_losses_recording_proposals(criterion, head, outputs, per_image, input_size):
    """The criterion's dense losses on the head's training outputs, and how many tokens each propose call got:
    (losses, the dense outputs by name, the encoded targets, [tokens per call])."""
    encoded = criterion.encode(per_image, input_size, outputs, "cpu")
    dense = {k.split(".")[-1]: v for k, v in outputs.items() if k.startswith(f"{criterion.task}.dense.")}
    calls = []

    def recording_propose(features, anchors):
        calls.append(features.shape[1])
        return head.propose(features, anchors)

    return criterion.dense_losses(dense, encoded, input_size, recording_propose), dense, encoded, calls


def test_the_dense_box_loss_proposes_for_its_positives_only_and_equals_the_every_token_loss():
    """The dense loss proposes boxes for the ATSS positives alone (the assignment reads only the anchors); its
    L1 / GIoU and their gradients must be those of proposing for every token and indexing the positives."""
    from torchvision.ops import box_convert, generalized_box_iou_loss

    from perception.losses.box_set_loss import LightCriterion
    from perception.losses.matcher import HungarianMatcher
    from perception.models.heads.lights import LightHead

    torch.manual_seed(0)
    head = LightHead(16, dim=32, num_queries=10, num_layers=1, ffn_dim=64, levels=(0, 1, 2)).train()
    with torch.no_grad():
        for parameter in head.parameters():  # the zero-initialised proposal layer would make every box its anchor
            parameter.add_(0.05 * torch.randn_like(parameter))
    feats = [torch.randn(2, 16, 224 // s, 448 // s) for s in (4, 8, 16, 32)]
    outputs = head(feats)
    assert "lights.dense.boxes" not in outputs and outputs["lights.dense.features"].shape == (2, 8232, 32)
    boxes = [torch.tensor([[200.0, 30.0, 208.0, 48.0], [300.0, 10.0, 330.0, 60.0]]),
             torch.tensor([[50.0, 5.0, 56.0, 20.0]])]
    per_image = [{"boxes_xyxy": b, "labels": torch.arange(len(b)) % 4} for b in boxes]
    targets = {"lights": {"valid": torch.tensor([True, True]), "input_size": (224, 448), "per_image": per_image}}
    criterion = LightCriterion(HungarianMatcher(), dense_weight=1.0)
    losses, dense, encoded, calls = _dense_losses_recording_proposals(criterion, head, outputs, per_image, (224, 448))
    # The reference: every token's proposal, the positives indexed out of it.
    every = head.propose(dense["features"], dense["anchors"])  # (B, N, 4)
    anchors = dense["anchors"][0]
    assigned = torch.stack([atss_assign(anchors, level_sizes(anchors), t["boxes"], 2.0)[0] for t in encoded])
    b, n = torch.nonzero(assigned >= 0, as_tuple=True)
    gt = torch.cat([encoded[0]["boxes"], encoded[1]["boxes"]])[assigned[b, n] + torch.tensor([0, 2])[b]]
    positives = every[b, n]
    reference = {"light_l1": (positives - gt).abs().sum() / len(b),
                 "light_giou": generalized_box_iou_loss(box_convert(positives, "cxcywh", "xyxy"),
                                                        box_convert(gt, "cxcywh", "xyxy"), reduction="sum") / len(b)}
    assert calls == [len(b)] and 3 <= len(b) <= 3 * 9  # proposed for the positives only, a few per light
    weight = head.enc_box.layers[0].weight
    for name, value in reference.items():
        assert losses[name].item() == pytest.approx(value.item(), rel=1e-5)
        grad, = torch.autograd.grad(losses[name], weight, retain_graph=True)
        grad_reference, = torch.autograd.grad(value, weight, retain_graph=True)
        torch.testing.assert_close(grad, grad_reference, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match=r"head=model.heads\['lights'\]"):
        criterion(outputs, targets)  # the dense loss needs the head that made the outputs


def test_the_dense_lane_loss_proposes_for_the_tokens_near_a_lane_and_equals_the_every_token_loss():
    """The lane assignment compares the proposals of the tokens near each lane only, and every positive is one
    of them: proposing for those alone must give the every-token loss and gradients."""
    from perception.losses.lane_loss import LaneCriterion
    from perception.models.heads.lanes import LaneHead

    torch.manual_seed(0)
    head = LaneHead(16, dim=32, num_queries=6, num_points=24, num_layers=1, ffn_dim=64).train()
    with torch.no_grad():
        for parameter in head.parameters():  # non-zero proposal layers: the fit cost decides between tokens
            parameter.add_(0.05 * torch.randn_like(parameter))
    levels = [torch.randn(2, 16, 128 // s, 256 // s) for s in (4, 8, 16, 32)]
    outputs = head(levels)
    lanes = [[torch.tensor([[60.0, 128.0], [110.0, 40.0]]), torch.tensor([[200.0, 128.0], [150.0, 50.0]])], []]
    per_image = [{"polylines": p, "labels": torch.zeros(len(p), dtype=torch.int64)} for p in lanes]
    losses, dense, encoded, calls = _dense_losses_recording_proposals(LaneCriterion(), head, outputs, per_image,
                                                                      (128, 256))
    # The reference: every token proposes, the assignment and the point loss index the positives out of it.
    anchors = dense["anchors"][0]
    every = head.propose(dense["features"], anchors[None])  # (B, N, P)
    assigned = torch.stack([lane_assign(anchors, level_sizes(anchors), every[i].detach(), t["points"],
                                        t["visible"])[0] for i, t in enumerate(encoded)])
    b, n = torch.nonzero(assigned >= 0, as_tuple=True)
    points, visible = encoded[0]["points"][assigned[b, n]], encoded[0]["visible"][assigned[b, n]].float()
    assert (b == 0).all() and 2 <= len(b) <= 2 * 4  # a few positives per lane, none in the image without lanes
    reference = (((every[b, n] - points).abs() * visible).sum(-1) / visible.sum(-1)).sum() / len(b)
    assert len(calls) == 1 and len(b) <= calls[0] < 0.2 * anchors.shape[0]  # the near tokens, not all
    assert losses["lane_points"].item() == pytest.approx(reference.item(), rel=1e-5)
    weight = head.enc_points.layers[0].weight
    grad, = torch.autograd.grad(losses["lane_points"], weight, retain_graph=True)
    torch.testing.assert_close(grad, torch.autograd.grad(reference, weight)[0], rtol=1e-4, atol=1e-7)


def test_best_of_each_equals_the_per_object_argmax_with_its_first_maximum_on_ties():
    """best_of_each is vectorised over images and objects; it must pick what a loop over objects with
    ``argmax`` picks (the first maximal token), ties, objects without positives and empty images included."""
    generator = torch.Generator().manual_seed(0)
    assigned = torch.randint(-1, 5, (4, 40), generator=generator)
    assigned[2] = -1  # an image without positives
    assigned[assigned == 3] = -1  # an object index nobody holds
    quality = torch.randint(0, 3, (4, 40), generator=generator).float()  # many ties
    expected = torch.zeros_like(assigned, dtype=torch.bool)
    for b in range(4):
        for j in assigned[b][assigned[b] >= 0].unique().tolist():
            tokens = torch.nonzero(assigned[b] == j).flatten()
            expected[b, tokens[quality[b, tokens].argmax()]] = True
    assert torch.equal(best_of_each(assigned, quality), expected)
    assert not best_of_each(torch.full((2, 5), -1), torch.zeros(2, 5)).any()
