"""Denoising queries of the box heads (model.heads.{obstacles,lights}.denoising_queries; DN-DETR): noised
ground-truth boxes join the decoder in training, masked from the selected queries, and are scored against the
object each came from without matching. Inference and the exported graph never see them."""

from __future__ import annotations

import pytest
import torch
from head_export import export_head, one_obstacle
from torchvision.ops import box_convert

from perception.config import ConfigError
from perception.losses.box_set_loss import LightCriterion
from perception.losses.obstacle_loss import ObstacleCriterion
from perception.models.heads.denoising import DenoisingQueries
from perception.models.heads.lights import LightHead
from perception.models.heads.obstacles import ObstacleHead

TWO = {"labels": torch.tensor([1, 3]), "boxes": torch.tensor([[0.3, 0.5, 0.1, 0.2], [0.7, 0.4, 0.2, 0.1]])}
NONE = {"labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}


def _levels(batch: int = 2):
    torch.manual_seed(1)
    return [torch.randn(batch, 16, 32 // s, 64 // s) for s in (1, 2, 4, 8)]


def test_groups_padding_noise_and_attention_mask():
    torch.manual_seed(0)
    dn = DenoisingQueries(num_classes=4, dim=8, max_queries=7, box_noise=0.4, label_noise=0.0)
    batch = dn([TWO, NONE, {"labels": torch.tensor([2]), "boxes": torch.tensor([[0.5, 0.5, 0.4, 0.4]])}],
               num_queries=5)
    # 7 // 2 = 3 groups of the most objects in an image (2): 6 queries, padded where an image has fewer.
    assert batch.index.tolist() == [[0, 1, 0, 1, 0, 1], [-1] * 6, [0, -1, 0, -1, 0, -1]]
    assert batch.content.shape == (3, 6, 8) and batch.attend.shape == (3, 1, 11, 11)
    # Every corner within 0.4 x half the box's size of the truth.
    truth = box_convert(TWO["boxes"], "cxcywh", "xyxy").repeat(3, 1)
    noised = box_convert(batch.reference[0], "cxcywh", "xyxy")
    half = torch.cat([TWO["boxes"][:, 2:]] * 2, -1).repeat(3, 1) / 2
    assert ((noised - truth).abs() <= 0.4 * half + 1e-6).all() and (noised - truth).abs().max() > 0
    attend = batch.attend[0, 0]
    assert attend[6:, 6:].all() and not attend[6:, :6].any()  # the selected queries never see the copies
    assert attend[:6, 6:].all()  # the copies see the selected queries
    assert attend[0, :6].tolist() == [True, True, False, False, False, False]  # only their own group
    third = batch.attend[2, 0]
    assert third[0, :6].tolist() == [True, False, False, False, False, False]  # not the padding
    assert third[:, 1].tolist() == [False, True] + [False] * 9  # nobody else sees a padding query


def test_label_noise_flips_about_its_share_of_labels():
    torch.manual_seed(0)
    many = {"labels": torch.zeros(50, dtype=torch.int64), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]]).repeat(50, 1)}
    dn = DenoisingQueries(num_classes=10, dim=8, max_queries=500, label_noise=0.5)
    embedded = dn([many], num_queries=3).content[0]  # (500, 8)
    same = (embedded == dn.label_embed.weight[0]).all(-1).float().mean().item()
    assert 0.5 < same < 0.6  # half kept, and 1/10 of the flipped half drew label 0 again


@pytest.mark.parametrize("cross_attention", ["dense", "deformable"])
def test_the_selected_queries_outputs_do_not_depend_on_the_denoising_queries(cross_attention):
    head = ObstacleHead(16, dim=32, num_queries=8, num_layers=2, ffn_dim=64, levels=(1, 2),
                        cross_attention=cross_attention, denoising_queries=10)
    levels = _levels()
    plain = head(levels)
    noised = head(levels, denoising=[TWO, NONE])
    assert noised["obstacles.dn.index"].shape == (2, 10)
    for name, value in plain.items():
        assert torch.allclose(value, noised[name], atol=1e-5), name  # the mask lets nothing leak
    for i in range(2):
        assert noised[f"obstacles.dn{i}.boxes"].shape == (2, 10, 4)
        assert noised[f"obstacles.dn{i}.depth"].shape == (2, 10)
    head.eval()
    assert set(head(levels, denoising=[TWO, NONE])) == {k for k in plain if ".aux" not in k and ".enc" not in k
                                                        and ".dense" not in k}


def test_criterion_scores_each_denoising_query_against_its_own_object():
    criterion = LightCriterion(dense_weight=0.0)
    targets = {"lights": {"valid": torch.tensor([True, False]), "input_size": (100, 100), "per_image": [
        {"boxes_xyxy": torch.tensor([[20.0, 40.0, 40.0, 60.0], [60.0, 35.0, 80.0, 45.0]]),
         "labels": torch.tensor([1, 3])},
        {"boxes_xyxy": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}]}}
    truth = criterion.denoising_targets(targets, "cpu")
    assert len(truth[1]["labels"]) == 0  # the unlabelled image gets no denoising queries
    index = torch.tensor([[0, 1, 0, 1, -1], [-1] * 5])
    exact = torch.full((2, 5, 4), 0.5)
    exact[0, :4] = truth[0]["boxes"][index[0, :4]]
    logits = torch.full((2, 5, 4), -4.0)
    logits[0, torch.arange(4), truth[0]["labels"][index[0, :4]]] = 4.0
    base = {"lights.logits": torch.zeros(2, 3, 4), "lights.boxes": torch.full((2, 3, 4), 0.5)}
    without = criterion(base, targets)

    def with_dn(boxes):
        return criterion(base | {"lights.dn.index": index, "lights.dn0.logits": logits, "lights.dn0.boxes": boxes},
                         targets)

    on_target = with_dn(exact)
    assert torch.allclose(on_target["light_l1"], without["light_l1"])  # exact boxes add no box loss
    assert torch.allclose(on_target["light_giou"], without["light_giou"])
    assert on_target["light_cls"] > without["light_cls"]  # confident but not perfect logits cost a little
    swapped = exact.clone()
    swapped[0, [0, 1]] = exact[0, [1, 0]]  # two queries each on the other object: no matching rescues them
    assert with_dn(swapped)["light_l1"] > on_target["light_l1"] + 0.1


def test_denoising_trains_the_obstacle_head_through_its_3d_terms():
    torch.manual_seed(0)
    head = ObstacleHead(16, dim=32, num_queries=6, num_layers=2, ffn_dim=64, levels=(1, 2), denoising_queries=8)
    criterion = ObstacleCriterion(dense_weight=0.0)
    targets = one_obstacle(yaw=0.3)
    outputs = head(_levels(1), denoising=criterion.denoising_targets(targets, "cpu"))
    losses = criterion(outputs, targets, head=head)
    sum(losses.values()).backward()
    assert head.denoising.label_embed.weight.grad.abs().sum() > 0  # the label embedding learns
    assert all(torch.isfinite(v) for v in losses.values())


def test_light_head_takes_denoising_queries_and_the_lane_config_has_none():
    from conftest import experiment_dict

    from perception.config import parse_config

    head = LightHead(16, num_queries=5, levels=(0, 1), denoising_queries=4)
    outputs = head(_levels(), denoising=[TWO, NONE])
    assert outputs["lights.dn1.logits"].shape == (2, 4, 4)
    with pytest.raises(ConfigError, match="denoising_queries"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(lights=dict(denoising_queries=-1)))))
    with pytest.raises(ConfigError, match="denoising_box_noise"):
        parse_config(experiment_dict("unused", model=dict(heads=dict(obstacles=dict(denoising_box_noise=2.0)))))
    with pytest.raises(ConfigError, match="denoising_queries"):  # not a lane head field: unknown key
        parse_config(experiment_dict("unused", model=dict(heads=dict(lanes=dict(denoising_queries=10)))))


def test_the_exported_head_has_no_denoising_branch(tmp_path):
    import numpy as np
    import onnx

    head = ObstacleHead(16, dim=32, num_queries=6, num_layers=2, ffn_dim=64, levels=(1, 2),
                        cross_attention="deformable", denoising_queries=8).eval()
    levels = _levels(1)

    path = str(tmp_path / "obstacles.onnx")
    with torch.no_grad():
        expected = head(levels)
    _, (logits, boxes) = export_head(head, levels, ["obstacles.logits", "obstacles.boxes"], path)
    shapes = {tuple(t.dims) for t in onnx.load(path).graph.initializer}
    assert tuple(head.denoising.label_embed.weight.shape) not in shapes  # the label embedding is not in it
    assert np.abs(logits - expected["obstacles.logits"].numpy()).max() < 1e-4
    assert np.abs(boxes - expected["obstacles.boxes"].numpy()).max() < 1e-4
