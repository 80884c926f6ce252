"""Backbone, neck and head shapes, NCHW outputs, and local pretrained weights."""

from __future__ import annotations

import pytest
import timm
import torch

from perception.build import build_model
from perception.config import parse_config
from perception.models.backbone import SHIFTED_WINDOW_MASK, SwinBackbone
from perception.models.fpn import FPN
from tests.conftest import TINY_MODEL, experiment_dict

TINY_ARCH = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))


@pytest.mark.parametrize("size", [(224, 448), (448, 224)])
def test_shapes_at_non_square_sizes(size):
    cfg = parse_config(experiment_dict("/unused", input_size=list(size)))
    model = build_model(cfg.model, size).eval()
    features = model.backbone(torch.randn(2, 3, *size))
    assert [f.shape[1] for f in features] == model.backbone.channels == [32, 64, 128, 256]
    for feature, stride in zip(features, model.backbone.strides):
        assert feature.shape[-2:] == (size[0] // stride, size[1] // stride)  # NCHW, not NHWC
    levels = model.neck(features)
    assert all(level.shape[1] == 32 for level in levels)
    outputs = model(torch.randn(2, 3, *size))
    assert set(outputs) == {"drivable.logits"}
    assert outputs["drivable.logits"].shape == (2, 2, size[0] // 4, size[1] // 4)


def test_neck_is_sized_from_feature_info():
    neck = FPN([16, 40, 80, 160], channels=24)
    levels = neck([torch.randn(1, c, 32 // s, 32 // s) for c, s in zip([16, 40, 80, 160], [1, 2, 4, 8])])
    assert [tuple(level.shape) for level in levels] == [(1, 24, 32, 32), (1, 24, 16, 16), (1, 24, 8, 8), (1, 24, 4, 4)]


def test_pretrained_weights_load_from_a_local_file(tmp_path):
    reference = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=(224, 448), **TINY_ARCH)
    path = tmp_path / "swin_tiny_local.pth"
    torch.save(reference.state_dict(), path)
    backbone = SwinBackbone("swin_tiny_patch4_window7_224", (224, 448), pretrained_path=str(path), **TINY_ARCH)
    loaded = dict(backbone.body.named_parameters())
    name = "layers_2.blocks.1.attn.qkv.weight"
    assert torch.equal(loaded[name], reference.state_dict()[name.replace("layers_", "layers.")])


def test_missing_pretrained_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="pretrained_path"):
        SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), pretrained_path=str(tmp_path / "nope.pth"),
                     **TINY_ARCH)


def test_tiny_model_config_is_the_demo_model():
    assert TINY_MODEL["backbone"]["embed_dim"] == 32


def test_geometric_depth_starts_at_focal_times_height_over_box_height():
    """With a zero residual the obstacle head's depth decodes to z = fx * H / h (the pinhole prior)."""
    from perception.core.obstacle_coding import decode_depth
    from perception.models.heads.obstacles import ObstacleHead

    head = ObstacleHead(16, dim=32, num_queries=5, num_layers=1, ffn_dim=64, input_height=224)
    queries = torch.zeros(1, 5, 32)
    boxes = torch.tensor([[[0.5, 0.5, 0.1, h, ] for h in (0.05, 0.1, 0.2, 0.4, 0.8)]])
    torch.nn.init.zeros_(head.head_3d.layers[-1].weight)
    torch.nn.init.zeros_(head.head_3d.layers[-1].bias)  # residual 0, log size 0: H = 1 m
    out = head.extra_outputs(0, queries, boxes, "obstacles")
    fx = 350.0
    expected = fx * 1.0 / (boxes[0, :, 3] * 224)
    assert torch.allclose(decode_depth(out["obstacles.depth"][0], fx), expected, rtol=1e-5)


def test_query_heads_propose_only_for_the_selected_tokens_and_get_every_token_proposals_there():
    """Each query head runs its proposal MLP on the top-k tokens only (fewer FLOPs in training and in the exported
    graph); they must be the every-token proposals of those tokens, and inference the same as training."""
    from perception.models.heads.query_memory import gather_tokens, select_top_k

    heads = dict(TINY_MODEL["heads"], obstacles=dict(dim=32, num_queries=12, num_layers=1, ffn_dim=64),
                 lanes=dict(dim=32, num_queries=6, num_layers=1, ffn_dim=64),
                 lights=dict(dim=32, num_queries=8, num_layers=1, ffn_dim=64, levels=[0, 1, 2]))
    cfg = parse_config(experiment_dict("/unused", model=dict(TINY_MODEL, heads=heads),
                                       bdd100k=dict(data_root="/unused")))
    torch.manual_seed(0)
    model = build_model(cfg.model, (128, 256))
    with torch.no_grad():
        for parameter in model.parameters():  # the zero-initialised last layers would hide a wrong gather
            parameter.add_(0.05 * torch.randn_like(parameter))
        levels = model.neck(model.backbone(torch.randn(2, 3, 128, 256)))
        for name, geometry in (("obstacles", "boxes"), ("lanes", "points"), ("lights", "boxes")):
            head = model.heads[name]
            trained = head.train()(levels)
            memory, _, anchors, _ = head.memory(levels)
            features = head.enc_output(memory)
            top = select_top_k(head.enc_class(features), head.num_queries)
            every_token = head.propose(features, anchors)  # (B, N, G)
            assert torch.equal(trained[f"{name}.dense.features"], features)  # the dense loss proposes from these
            selected = head.propose(gather_tokens(features, top), gather_tokens(anchors.expand(2, -1, -1), top))
            torch.testing.assert_close(selected, gather_tokens(every_token, top), rtol=0, atol=1e-6)
            torch.testing.assert_close(trained[f"{name}.enc.{geometry}"], selected, rtol=0, atol=1e-6)
            # No dropout or other training-only path changes the outputs: the whole decoder agrees.
            inferred = head.eval()(levels)
            for output in (f"{name}.logits", f"{name}.{geometry}"):
                torch.testing.assert_close(inferred[output], trained[output], rtol=0, atol=1e-5)


def _masked_attention_weights(body: torch.nn.Module,
                              images: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(the softmax weights of every shifted-window block of a timm Swin, from its explicit (non-fused) path,
    the body's features)."""
    captured, hooks = [], []
    for block in body.modules():
        if getattr(block, "attn_mask", None) is not None:
            block.attn.fused_attn = False
            hooks.append(block.attn.softmax.register_forward_hook(lambda _m, _i, out: captured.append(out)))
    with torch.no_grad():
        features = body(images)
    for hook in hooks:
        hook.remove()
    return captured, features


def test_shifted_window_masks_give_exact_zeros_not_subnormal_weights():
    """timm's -100 leaves exp(-100) = 3.7e-44 (a subnormal float32, slow on x86) in every masked weight; the
    backbone's masks give exact zeros, and its features stay timm's."""
    torch.manual_seed(0)
    backbone = SwinBackbone("swin_tiny_patch4_window7_224", (224, 448), **TINY_ARCH).eval()
    timm_body = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=(224, 448),
                                  features_only=True, **TINY_ARCH).eval()
    timm_body.load_state_dict(backbone.body.state_dict())
    masks = [b.attn_mask for b in backbone.body.modules() if getattr(b, "attn_mask", None) is not None]
    assert masks and all(set(m.unique().tolist()) == {0.0, SHIFTED_WINDOW_MASK} for m in masks)

    images = torch.randn(2, 3, 224, 448)
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal float32

    def subnormals(weights: list[torch.Tensor]) -> int:
        return sum(int(((w > 0) & (w < tiny)).sum()) for w in weights)

    ours, our_features = _masked_attention_weights(backbone.body, images)
    timms, timm_features = _masked_attention_weights(timm_body, images)
    assert subnormals(timms) > 0  # what the fix is for
    assert subnormals(ours) == 0
    assert sum(int((w == 0).sum()) for w in ours) > 0
    for a, b in zip(our_features, timm_features):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
