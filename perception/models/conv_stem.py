"""A convolutional stem for Swin in place of its 4x4 patchify convolution (Xiao et al. 2021, "Early
Convolutions Help Transformers See Better": stacked stride-2 3x3 convolutions make a vision transformer
converge faster and less sensitively to its optimiser settings than one large-stride patch projection).

With the patchify stem each stride-4 token is a linear function of its own 4x4 pixels; the heads that read
stride 4 (lane markings a few pixels wide, traffic lights of 6x14 px) then see only what one Swin block
adds to that. The conv stem gives every stride-4 token overlapping, non-linear evidence from a 7x7-pixel
neighbourhood (token j reads pixels 4j-3 .. 4j+3 in each direction). Plain Conv + BatchNorm + ReLU: BatchNorm
folds into the convolution at export.
"""

from __future__ import annotations

from timm.layers import PatchEmbed
from torch import nn


class ConvStem(PatchEmbed):
    """Drop-in ``embed_layer`` for timm's SwinTransformer (same arguments, same checks and output layout).

    images [B,3,H,W] -> conv3x3/2 (embed_dim/2) -> BN, ReLU -> conv3x3/2 (embed_dim) -> BN, ReLU
    -> conv1x1 (embed_dim) -> tokens [B,H/4,W/4,embed_dim] (NHWC, then timm's norm), as the patch embedding.
    """

    def __init__(self, img_size=224, patch_size=4, in_chans=3, embed_dim=96, norm_layer=None, flatten=True,
                 output_fmt=None, bias=True, strict_img_size=True, dynamic_img_pad=False, device=None, dtype=None):
        super().__init__(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim,
                         norm_layer=norm_layer, flatten=flatten, output_fmt=output_fmt, bias=bias,
                         strict_img_size=strict_img_size, dynamic_img_pad=dynamic_img_pad, device=device, dtype=dtype)
        if self.patch_size != (4, 4):
            raise ValueError(f"ConvStem replaces a stride-4 patch embedding; got patch_size {self.patch_size}")
        hidden = max(embed_dim // 2, 8)
        self.proj = nn.Sequential(  # replaces PatchEmbed's Conv2d(k=4, s=4); PatchEmbed.forward calls it
            nn.Conv2d(in_chans, hidden, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, embed_dim, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(embed_dim),
            nn.ReLU(inplace=True),
            nn.Conv2d(embed_dim, embed_dim, 1, bias=bias),
        )
