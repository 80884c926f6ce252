"""Swin Transformer backbone from timm, returning NCHW feature maps at strides 4/8/16/32."""

from __future__ import annotations

import os

import timm
import torch
from timm.layers import PatchEmbed
from torch import nn

from perception.models.conv_stem import ConvStem
from perception.models.window_attention import export_window_attention

STEMS = {"patch": PatchEmbed, "conv": ConvStem}  # timm SwinTransformer's embed_layer
SHIFTED_WINDOW_MASK = -1000.0  # additive score of the pairs a shifted window must not mix (zero_masked_attention)


def zero_masked_attention(body: nn.Module) -> None:
    """Give the shifted-window blocks' attention masks exact zeros after the softmax.

    timm marks the pairs a shifted window must not mix with -100. exp(-100) = 3.7e-44 is a subnormal float32, and
    x86 cores take microcode assists on every multiply with one: in ONNX Runtime the shifted block's attention
    and the projection after it took 18 ms of the deployment graph's 126 (2026-12-05, Intel Xeon). Below about
    -104 the softmax's exp underflows to exactly 0 in float32 and float16 alike; SHIFTED_WINDOW_MASK stays under
    the export's FP16 activation check (|x| <= 1e4). The softmax changes by at most 4e-44 per weight.
    """
    for block in body.modules():
        mask = getattr(block, "attn_mask", None)
        if isinstance(mask, torch.Tensor) and mask.is_floating_point():  # a static buffer (strict_img_size)
            block.attn_mask = torch.where(mask < 0, torch.full_like(mask, SHIFTED_WINDOW_MASK), mask)


class SwinBackbone(nn.Module):
    """timm Swin with ``features_only``; its ``feature_info`` sizes the neck.

    Args:
        name: timm model name, e.g. ``swin_tiny_patch4_window7_224``.
        input_size: (H, W) the network is built for (Swin's attention masks depend on it).
        pretrained_path: local checkpoint of the same timm model (never a hub download).
        stem: "patch" (Swin's 4x4 patchify convolution) or "conv" (``ConvStem``: two stride-2 3x3 convolutions;
            trained from scratch, so not with ``pretrained_path``).
        onnx_window_attention: how the window attention is written in an exported graph: "per_head" (fewer
            copies; ``perception.models.window_attention``) or "batched" (timm's). Training is the same either way.
        **overrides: architecture overrides passed to timm (embed_dim, depths, num_heads, window_size, ...);
            window_size is one int or (height, width).
    """

    def __init__(self, name: str, input_size: tuple[int, int], pretrained_path: str | None = None,
                 drop_path_rate: float = 0.1, stem: str = "patch", onnx_window_attention: str = "per_head",
                 **overrides):
        super().__init__()
        window = overrides.get("window_size")
        if window is not None:
            sizes = list(window) if isinstance(window, (list, tuple)) else [window]
            if len(sizes) not in (1, 2) or not all(isinstance(v, int) and v > 0 for v in sizes):
                raise ValueError(f"model.backbone.window_size {window!r} must be a positive int or a pair of them "
                                 "(height, width), e.g. 7 or [6, 10]")
            overrides["window_size"] = sizes[0] if len(sizes) == 1 else tuple(sizes)
        if stem not in STEMS:
            raise ValueError(f"backbone stem {stem!r} is not one of {sorted(STEMS)}")
        if stem != "patch" and pretrained_path:
            raise ValueError(f"backbone stem {stem!r} has no pretrained weights; use stem='patch' with "
                             "pretrained_path, or train from scratch without it")
        kwargs = dict(features_only=True, img_size=tuple(input_size), drop_path_rate=drop_path_rate,
                      embed_layer=STEMS[stem], **overrides)
        if pretrained_path:
            if not os.path.isfile(pretrained_path):
                raise FileNotFoundError(f"backbone pretrained_path {pretrained_path} does not exist; weights are "
                                        "loaded from local files only (set model.backbone.pretrained_path)")
            # timm's own loader adapts the checkpoint (relative-position tables, window size).
            kwargs.update(pretrained=True, pretrained_cfg_overlay=dict(file=os.path.abspath(pretrained_path)))
        self.body = timm.create_model(name, **kwargs)
        zero_masked_attention(self.body)
        export_window_attention(self.body, onnx_window_attention)
        self.channels: list[int] = list(self.body.feature_info.channels())
        self.strides: list[int] = list(self.body.feature_info.reduction())
        self.output_nhwc = str(getattr(self.body, "output_fmt", "NCHW")).endswith("NHWC")

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        """images [B,3,H,W] -> features [B,C_i,H/s_i,W/s_i] for s_i in self.strides."""
        features = self.body(images)
        if self.output_nhwc:  # timm Swin stages are NHWC
            features = [f.permute(0, 3, 1, 2).contiguous() for f in features]
        return features
