"""The config fields every DETR-style head shares (perception.models.heads.query_decoder)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class QueryDecoderConfig:
    dim: int = 64  # decoder width
    num_queries: int = 30
    num_layers: int = 2
    num_heads: int = 4
    ffn_dim: int = 256
    levels: tuple = (1, 2, 3)  # FPN levels used as memory (0 = stride 4 ... 3 = stride 32)
    memory_convs: int = 0  # residual 3x3 conv blocks on the memory tokens (query_memory.ConvTower)
    reference_sampling: bool = True  # queries read the finest memory level at their reference (ReferenceSampler)
    # "dense": attention to every memory token; "deformable": a few learned points per head and level
    # around the query's reference box (models/deformable_attention.py)
    cross_attention: str = "dense"

    def decoder_kwargs(self) -> dict:
        """The shared fields as keyword arguments of a query head."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(QueryDecoderConfig)} | {
            "levels": tuple(self.levels)}


@dataclass
class BoxQueryConfig(QueryDecoderConfig):
    """The box heads' fields (obstacles, lights): the shared ones plus denoising queries."""

    # Training only (DN-DETR; perception/models/heads/denoising.py): up to this many noised ground-truth
    # boxes per image join the decoder's queries and are trained without matching; 0 = off.
    denoising_queries: int = 0
    denoising_box_noise: float = 0.4  # corners move by up to this x half the box's width / height
    denoising_label_noise: float = 0.2  # probability that a denoising query carries a random label

    def decoder_kwargs(self) -> dict:
        return super().decoder_kwargs() | {"denoising_queries": self.denoising_queries,
                                           "denoising_box_noise": self.denoising_box_noise,
                                           "denoising_label_noise": self.denoising_label_noise}
