"""DETR-style 3D obstacle head with query selection and layer-by-layer box refinement.

Memory: FPN levels (strides 8/16/32 by default) projected to ``dim`` channels and flattened
into tokens, with 2D sine positions and a learned level embedding. Each token predicts a
class and a box relative to its anchor (two-stage / RT-DETR-style); the top-``num_queries``
tokens initialise the decoder queries (content = token feature, position = its box). Every
decoder layer refines the boxes (new = sigmoid(logit(previous) + delta), gradient stopped
between layers) and predicts classes and 3D quantities. Only standard attention is used.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from perception.models.heads.obstacle_coding import PRIOR_LOG_SIZE
from perception.models.position_encoding import box_sine_encoding, sine_encoding_2d
from perception.models.transformer import DecoderLayer

# Per-query 3D outputs, in this order along the last dimension of the 3D MLP.
OUTPUT_3D = (("center", 2), ("depth", 1), ("size", 3), ("yaw", 2), ("velocity", 2))


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(eps, 1 - eps)
    return torch.log(x / (1 - x))


class MLP(nn.Module):
    def __init__(self, dim_in: int, hidden: int, dim_out: int, layers: int):
        super().__init__()
        dims = [dim_in] + [hidden] * (layers - 1) + [dim_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class ObstacleHead(nn.Module):
    """FPN levels -> ``obstacles.*`` tensors (shapes in ``forward``)."""

    def __init__(self, in_channels: int, num_classes: int = 10, num_attributes: int = 8, dim: int = 128,
                 num_queries: int = 100, num_layers: int = 3, num_heads: int = 4, ffn_dim: int = 512,
                 levels: tuple[int, ...] = (1, 2, 3)):
        super().__init__()
        self.levels = tuple(levels)
        self.dim = dim
        self.num_queries = num_queries
        self.num_classes = num_classes
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(in_channels, dim, 1), nn.GroupNorm(min(32, dim // 4), dim)) for _ in self.levels)
        self.level_embed = nn.Parameter(torch.zeros(len(self.levels), dim))
        self.enc_output = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
        self.enc_class = nn.Linear(dim, num_classes)
        self.enc_box = MLP(dim, dim, 4, 3)
        self.query_pos = MLP(dim, dim, dim, 2)
        self.layers = nn.ModuleList(DecoderLayer(dim, num_heads, ffn_dim) for _ in range(num_layers))
        self.class_heads = nn.ModuleList(nn.Linear(dim, num_classes) for _ in range(num_layers))
        self.box_heads = nn.ModuleList(MLP(dim, dim, 4, 3) for _ in range(num_layers))
        self.num_attributes = num_attributes
        self.head_3d = MLP(dim, dim, sum(n for _, n in OUTPUT_3D) + num_attributes, 3)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        prior = -math.log((1 - 0.01) / 0.01)  # start every class at p = 0.01 (focal-loss practice)
        for head in [self.enc_class, *self.class_heads]:
            nn.init.constant_(head.bias, prior)
        for mlp in [self.enc_box, *self.box_heads]:
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.normal_(self.level_embed, std=0.02)
        last = self.head_3d.layers[-1]
        nn.init.zeros_(last.weight)
        with torch.no_grad():
            last.bias.zero_()
            last.bias[2] = 3.0  # depth code ~ log(20 m * F_REF / 500 px)
            last.bias[3:6] = torch.tensor(PRIOR_LOG_SIZE)
            last.bias[7] = 1.0  # yaw (sin, cos) = (0, 1)

    def _memory(self, levels: list[torch.Tensor]):
        """Tokens [B,N,D], positions [B... broadcast 1,N,D], anchors [1,N,4] (cxcywh, normalised)."""
        tokens, positions, anchors = [], [], []
        for i, (level_index, proj) in enumerate(zip(self.levels, self.input_proj)):
            x = proj(levels[level_index])  # (B, D, H, W)
            _, _, height, width = x.shape
            tokens.append(x.flatten(2).transpose(1, 2))  # (B, H*W, D)
            positions.append(sine_encoding_2d(height, width, self.dim, x.device) + self.level_embed[i])
            ys = (torch.arange(height, device=x.device, dtype=torch.float32) + 0.5) / height
            xs = (torch.arange(width, device=x.device, dtype=torch.float32) + 0.5) / width
            cy, cx = torch.meshgrid(ys, xs, indexing="ij")
            size = torch.full_like(cx, 0.05 * 2.0 ** i)
            anchors.append(torch.stack([cx, cy, size, size], dim=-1).reshape(-1, 4))
        return torch.cat(tokens, 1), torch.cat(positions, 0)[None], torch.cat(anchors, 0)[None]

    def _predict_3d(self, queries: torch.Tensor, boxes: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
        raw = self.head_3d(queries)
        out, start = {}, 0
        for name, width in OUTPUT_3D:
            out[name] = raw[..., start:start + width]
            start += width
        out["center"] = boxes[..., :2] + out["center"] * boxes[..., 2:]
        out["depth"] = out["depth"][..., 0]
        return {f"{prefix}.{k}": v for k, v in out.items()} | {f"{prefix}.attribute": raw[..., start:]}

    def forward(self, levels: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Returns (B images, Q queries, C classes, A attributes; boxes normalised to the input):

        obstacles.logits [B,Q,C]     class logits (sigmoid; no background class)
        obstacles.boxes [B,Q,4]      2D box cxcywh in [0, 1]
        obstacles.center [B,Q,2]     projected 3D centre (u, v) in [0, 1]
        obstacles.depth [B,Q]        depth code (see obstacle_coding)
        obstacles.size [B,Q,3]       log (w, l, h) metres
        obstacles.yaw [B,Q,2]        (sin, cos) of yaw_cam
        obstacles.velocity [B,Q,2]   (v_x, v_z) m/s, camera frame
        obstacles.attribute [B,Q,A]  attribute logits
        In training also ``obstacles.aux{i}.*`` per earlier decoder layer and
        ``obstacles.enc.{logits,boxes}`` for the selected token proposals.
        """
        memory, memory_pos, anchors = self._memory(levels)
        features = self.enc_output(memory)  # (B, N, D)
        enc_logits = self.enc_class(features)  # (B, N, C)
        enc_boxes = (self.enc_box(features) + inverse_sigmoid(anchors)).sigmoid()  # (B, N, 4)
        k = min(self.num_queries, memory.shape[1])
        top = enc_logits.max(dim=-1).values.topk(k, dim=1).indices  # (B, Q)
        queries = features.gather(1, top[..., None].expand(-1, -1, self.dim)).detach()
        reference = enc_boxes.gather(1, top[..., None].expand(-1, -1, 4))  # (B, Q, 4)
        outputs: dict[str, torch.Tensor] = {}
        if self.training:
            outputs["obstacles.enc.logits"] = enc_logits.gather(1, top[..., None].expand(-1, -1, self.num_classes))
            outputs["obstacles.enc.boxes"] = reference
        reference = reference.detach()
        for i, (layer, class_head, box_head) in enumerate(zip(self.layers, self.class_heads, self.box_heads)):
            query_pos = self.query_pos(box_sine_encoding(reference, self.dim))
            queries = layer(queries, memory, query_pos=query_pos, memory_pos=memory_pos)
            boxes = (box_head(queries) + inverse_sigmoid(reference)).sigmoid()
            last = i == len(self.layers) - 1
            if last or self.training:
                prefix = "obstacles" if last else f"obstacles.aux{i}"
                outputs[f"{prefix}.logits"] = class_head(queries)
                outputs[f"{prefix}.boxes"] = boxes
                outputs.update(self._predict_3d(queries, boxes, prefix))
            reference = boxes.detach()
        return outputs
