"""The convolutional stem (``model.backbone.stem="conv"``): a drop-in for Swin's patch embedding that keeps
every feature map's shape, trains, folds into plain ONNX convolutions and refuses weights it cannot use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perception.build import build_model
from perception.config import ConfigError, parse_config
from perception.models.backbone import SwinBackbone
from perception.models.conv_stem import ConvStem
from tests.conftest import TINY_MODEL, experiment_dict

TINY_ARCH = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))


def with_backbone(**settings) -> dict:
    """The tests' tiny model with these backbone settings added."""
    return {**TINY_MODEL, "backbone": {**TINY_MODEL["backbone"], **settings}}


def test_conv_stem_keeps_the_feature_maps_of_the_patch_stem():
    torch.manual_seed(0)
    patch = SwinBackbone("swin_tiny_patch4_window7_224", (224, 448), **TINY_ARCH).eval()
    conv = SwinBackbone("swin_tiny_patch4_window7_224", (224, 448), stem="conv", **TINY_ARCH).eval()
    assert isinstance(conv.body.patch_embed, ConvStem)
    images = torch.randn(2, 3, 224, 448)
    assert [f.shape for f in conv(images)] == [f.shape for f in patch(images)]
    assert conv.channels == patch.channels and conv.strides == patch.strides == [4, 8, 16, 32]


def test_a_stride4_token_sees_more_than_its_own_4x4_pixels():
    """What the stem is for: a pixel outside a token's 4x4 patch changes that token (patchify: it cannot)."""
    torch.manual_seed(0)
    for stem, reaches_neighbour in (("patch", False), ("conv", True)):
        embed = SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), stem=stem, **TINY_ARCH).body.patch_embed
        embed.eval()
        images = torch.randn(1, 3, 224, 224)
        moved = images.clone()
        moved[0, :, 40, 38] += 5.0  # pixel (40, 38): in token (10, 9)'s patch, within the stem's reach of (10, 10)
        with torch.no_grad():
            changed = (embed(moved) - embed(images)).abs()[0, 10, 10].max().item() > 1e-6  # NHWC tokens
        assert changed == reaches_neighbour, stem


def test_conv_stem_trains_its_batch_norm_and_weights():
    torch.manual_seed(0)
    backbone = SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), stem="conv", **TINY_ARCH).train()
    sum(f.mean() for f in backbone(torch.randn(2, 3, 224, 224))).backward()
    stem = backbone.body.patch_embed.proj
    assert stem[0].weight.grad is not None and stem[0].weight.grad.abs().sum() > 0
    assert stem[1].num_batches_tracked.item() == 1  # batch statistics in training


def test_conv_stem_exports_to_onnx_and_matches_pytorch(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    backbone = SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), stem="conv", **TINY_ARCH)
    backbone.train()
    for _ in range(3):  # non-trivial running statistics, so the folded BatchNorm is exercised
        backbone(torch.randn(4, 3, 224, 224))
    embed = backbone.body.patch_embed.eval()
    images = torch.randn(1, 3, 224, 224)
    path = tmp_path / "stem.onnx"
    torch.onnx.export(embed, (images,), str(path), input_names=["images"], output_names=["tokens"],
                      opset_version=17, dynamo=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (tokens,) = session.run(None, {"images": images.numpy()})
    with torch.no_grad():
        expected = embed(images).numpy()
    np.testing.assert_allclose(tokens, expected, atol=1e-4, rtol=1e-4)


def test_conv_stem_is_chosen_in_the_config_and_built():
    cfg = parse_config(experiment_dict("/unused", model=with_backbone(stem="conv")))
    model = build_model(cfg.model, tuple(cfg.input_size))
    assert isinstance(model.backbone.body.patch_embed, ConvStem)


@pytest.mark.parametrize("backbone, message", [
    ({"stem": "convolutional"}, "model.backbone.stem must be 'patch' or 'conv'"),
    ({"stem": "conv", "pretrained_path": "/weights/swin_t.pth"}, "has no pretrained weights.*/weights/swin_t.pth"),
])
def test_bad_stem_settings_are_config_errors(backbone, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(experiment_dict("/unused", model=with_backbone(**backbone)))


def test_backbone_refuses_a_stem_it_does_not_know_or_cannot_load(tmp_path):
    with pytest.raises(ValueError, match="stem 'vit'"):
        SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), stem="vit", **TINY_ARCH)
    with pytest.raises(ValueError, match="no pretrained weights"):
        SwinBackbone("swin_tiny_patch4_window7_224", (224, 224), stem="conv", pretrained_path=str(tmp_path / "w.pth"),
                     **TINY_ARCH)
