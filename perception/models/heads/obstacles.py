"""DETR-style 3D obstacle head: the shared box decoder (query selection, box refinement) plus,
per query, a projected 3D centre, depth, size, yaw, velocity and attribute.

Depth from geometry (``geometric_depth``, MonoDETR / GUPNet style): an object H metres tall whose
box is h pixels tall stands at z = fx * H / h, i.e. depth code log(z * F_REF / fx) = log(F_REF * H / h).
The head can predict a residual on that prior from its own 2D box and 3D height (both detached, so
the depth loss does not bend the box or the size). Off by default: in the convergence study it did
not lower the held-out translation error at the demo's budget (1.29 m vs 1.25 m, mAP 0.024 vs 0.034);
truncated and occluded boxes, whose 2D height is not the object's, may need the residual to learn
more than the free regression does.

Depth uncertainty (``depth_uncertainty``, MonoDLE / GUPNet / MonoDETR): a second depth output, the log of the
scale b of a Laplace distribution over the depth code, trained by the Laplace negative log-likelihood. It lets the
depth loss weigh objects by how well the image pins their depth (truncated, occluded, far); with
``postprocess.obstacle_depth_confidence`` the decoder also ranks detections by how likely their depth is within a
metre (postprocess/obstacles.py; off by default: it cost mAP in the convergence study).

Dense depth (``dense_depth``, training only; FCOS3D / MonoDETR's foreground depth): every memory token also
predicts the depth code of the object it would detect, from its feature and its anchor (where in the image and at
which stride it sits), and the dense loss trains it on the box ATSS positives. The 3D terms of the queries learn
from one matched query per object and decoder layer; this gives the shared tokens (which the selected queries
start from) a depth signal from a few tokens per object and level. Absent from inference and the exported graph.

Ground keypoint (``ground_keypoint``): the head also places the image row of the box's bottom centre
(``obstacles.bottom``, the projection of the 3D centre moved h/2 down to the ground). A camera at a known height
over flat ground turns that row into depth, z = fy x camera height / (v - cy); post-processing fuses it with the
regressed depth (``postprocess.obstacle_ground_depth``; postprocess/ground_depth.py). Why: on run 16's held-out
detections the projected centre's row was off by a median 1.0-1.2 px at 10-30 m while the regressed depth was off
by 6-8 %; a row that precise on the ground gives 2-4 %. Off by default: trained (convergence study, ground_depth),
the bottom row was off by 1.9-2.8 px at 10-30 m, as the box's bottom edge is (it sits f h / 2z below the centre,
so placing it is reading depth again), and mAP fell (0.136 against 0.185 at seed 0).

The 3D MLP reads the query's own 2D box (detached) beside its feature: a query's feature says what
the object looks like but not where in the image it is, and the image row of an object's foot and
its box height are the strongest monocular depth cues (a camera at a fixed height over the road).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from perception.core.obstacle_coding import F_REF, PRIOR_LOG_SIZE
from perception.models.heads.box_queries import BoxQueryHead
from perception.models.heads.query_memory import MLP

# Per-query 3D outputs, in this order along the last dimension of the 3D MLP ("yaw": 3 x yaw_bins wide with bins;
# "bottom" only with ground_keypoint, "depth_log_scale" only with depth_uncertainty).
OUTPUT_3D = (("center", 2), ("depth", 1), ("size", 3), ("yaw", 2), ("velocity", 2), ("bottom", 1),
             ("depth_log_scale", 1))
# The bottom centre's row starts 0.4 box heights below the box centre: near the bottom edge, where a car's footprint
# centre lies when seen from behind.
INITIAL_BOTTOM_OFFSET = 0.4
INITIAL_DEPTH_LOG_SCALE = math.log(0.2)  # a Laplace scale of 0.2 in log depth: +-20 % at the start


def yaw_bin_centres(bins: int) -> torch.Tensor:
    """[K] angles 2 pi k / K of the heading bins (k = 0 .. K-1), in atan2(sin, cos) terms."""
    return torch.arange(bins, dtype=torch.float32) * (2 * math.pi / bins)


def yaw_from_bins(logits: torch.Tensor, residual: torch.Tensor,
                  centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MultiBin heading (Deep3DBox): logits [...,K], residual [...,K,2] (sin, cos) of each bin's offset, centres [K]
    -> ((sin, cos) of each bin's heading [...,K,2], (sin, cos) of the most likely bin's heading [...,2]).

    The most likely bin is chosen by a one-hot of the maximum (ReduceMax, Equal, Mul: plain ONNX); a tie goes to
    the lower bin (averaging two opposite headings would give the (0, 0) the bins are there to avoid)."""
    sin_c, cos_c = centres.sin().to(residual.dtype), centres.cos().to(residual.dtype)  # (K,)
    sin_d, cos_d = residual[..., 0], residual[..., 1]
    per_bin = torch.stack([sin_c * cos_d + cos_c * sin_d, cos_c * cos_d - sin_c * sin_d], dim=-1)  # (..., K, 2)
    ranked = logits - 1e-4 * torch.arange(logits.shape[-1], device=logits.device, dtype=logits.dtype)
    best = (ranked == ranked.max(dim=-1, keepdim=True).values).to(residual.dtype)  # (..., K) one-hot
    return per_bin, (best[..., None] * per_bin).sum(-2)


BOX_FEATURES = ("cx", "cy", "w", "h", "log_w", "log_h")


def box_features(boxes: torch.Tensor) -> torch.Tensor:
    """boxes [..., 4] cxcywh in [0, 1] of the input -> [..., 6] (BOX_FEATURES): where and how big."""
    log_size = torch.log(boxes[..., 2:].clamp(min=1e-3))
    return torch.cat([boxes, log_size], dim=-1)


class ObstacleHead(BoxQueryHead):
    """FPN levels -> ``obstacles.*`` tensors (shapes in ``forward``)."""

    prefix = "obstacles"

    def __init__(self, in_channels: int, num_classes: int = 10, num_attributes: int = 8, dim: int = 128,
                 num_queries: int = 100, num_layers: int = 3, num_heads: int = 4, ffn_dim: int = 512,
                 levels: tuple[int, ...] = (1, 2, 3), memory_convs: int = 0,
                 reference_sampling: bool = True, input_height: int | None = None, cross_attention: str = "dense",
                 yaw_bins: int = 0, depth_uncertainty: bool = False, dense_depth: bool = False,
                 ground_keypoint: bool = False, **denoising):
        """``input_height`` (pixels of the network input): turns on the geometric depth prior; ``yaw_bins`` > 0: the
        heading as MultiBin classification + per-bin residual instead of a (sin, cos) regression;
        ``depth_uncertainty``: also the Laplace scale of the depth code (``obstacles.depth_log_scale``);
        ``dense_depth``: every token's depth code in training (``obstacles.dense.depth``, for the dense loss);
        ``ground_keypoint``: also the row of the box's bottom centre (``obstacles.bottom``);
        ``denoising``: ``BoxQueryHead``'s denoising options."""
        super().__init__(in_channels, num_classes, dim=dim, num_queries=num_queries, num_layers=num_layers,
                         num_heads=num_heads, ffn_dim=ffn_dim, levels=levels, memory_convs=memory_convs,
                         reference_sampling=reference_sampling, cross_attention=cross_attention, **denoising)
        self.num_attributes = num_attributes
        self.input_height = input_height
        self.box_embed = nn.Linear(len(BOX_FEATURES), dim)
        self.yaw_bins = yaw_bins
        optional = {"depth_log_scale": depth_uncertainty, "bottom": ground_keypoint}
        self.layout = tuple((name, 3 * yaw_bins if name == "yaw" and yaw_bins else width) for name, width in OUTPUT_3D
                            if optional.get(name, True))
        self.register_buffer("yaw_centres", yaw_bin_centres(yaw_bins) if yaw_bins else None, persistent=False)
        self.head_3d = MLP(dim, dim, sum(n for _, n in self.layout) + num_attributes, 3)
        last = self.head_3d.layers[-1]
        nn.init.zeros_(last.weight)
        with torch.no_grad():
            last.bias.zero_()
            # Depth code ~ log(20 m * F_REF / 500 px) without the prior; a zero residual with it.
            last.bias[2] = 0.0 if input_height else 3.0
            last.bias[3:6] = torch.tensor(PRIOR_LOG_SIZE)
            if yaw_bins:
                last.bias[6 + yaw_bins + 1:6 + 3 * yaw_bins:2] = 1.0  # every bin's residual (sin, cos) = (0, 1)
            else:
                last.bias[7] = 1.0  # yaw (sin, cos) = (0, 1)
            offsets = self.layout_offsets()
            if depth_uncertainty:
                last.bias[offsets["depth_log_scale"]] = INITIAL_DEPTH_LOG_SCALE
            if ground_keypoint:
                last.bias[offsets["bottom"]] = INITIAL_BOTTOM_OFFSET
        self.dense_depth = None
        if dense_depth:  # token feature + its anchor -> depth code, as the 3D MLP reads a query and its box
            self.dense_anchor_embed = nn.Linear(len(BOX_FEATURES), dim)
            self.dense_depth = MLP(dim, dim, 1, 2)
            nn.init.zeros_(self.dense_depth.layers[-1].weight)
            nn.init.constant_(self.dense_depth.layers[-1].bias, 3.0)  # the 3D MLP's starting depth code

    def layout_offsets(self) -> dict[str, int]:
        """Where each 3D output starts along the 3D MLP's last dimension."""
        offsets, start = {}, 0
        for name, width in self.layout:
            offsets[name] = start
            start += width
        return offsets

    def dense_extras(self, finest: torch.Tensor, features: torch.Tensor,
                     anchors: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.dense_depth is None:
            return {}
        depth = self.dense_depth(features + self.dense_anchor_embed(box_features(anchors)))  # (B, N, 1)
        return {f"{self.prefix}.dense.depth": depth[..., 0]}

    def extra_outputs(self, index: int, queries: torch.Tensor, boxes: torch.Tensor,
                      prefix: str) -> dict[str, torch.Tensor]:
        raw = self.head_3d(queries + self.box_embed(box_features(boxes.detach())))
        out, start = {}, 0
        for name, width in self.layout:
            out[name] = raw[..., start:start + width]
            start += width
        if self.yaw_bins:
            logits, residual = out["yaw"][..., :self.yaw_bins], out["yaw"][..., self.yaw_bins:]
            per_bin, out["yaw"] = yaw_from_bins(logits, residual.unflatten(-1, (self.yaw_bins, 2)), self.yaw_centres)
            if self.training:  # for the criterion: the bin classification and each bin's heading
                out["yaw_bin_logits"], out["yaw_per_bin"] = logits, per_bin
        out["center"] = boxes[..., :2] + out["center"] * boxes[..., 2:]
        out["depth"] = out["depth"][..., 0]
        if "bottom" in out:  # row of the bottom centre, in box heights from the box centre
            out["bottom"] = boxes[..., 1] + out["bottom"][..., 0] * boxes[..., 3]
        if "depth_log_scale" in out:
            out["depth_log_scale"] = out["depth_log_scale"][..., 0]
        if self.input_height:
            log_height = out["size"][..., 2].detach()  # log metres
            box_height = (boxes[..., 3].detach() * self.input_height).clamp(min=1.0)  # pixels
            out["depth"] = out["depth"] + math.log(F_REF) + log_height - torch.log(box_height)
        return {f"{prefix}.{k}": v for k, v in out.items()} | {f"{prefix}.attribute": raw[..., start:]}

    def forward(self, levels: list[torch.Tensor], denoising: list[dict] | None = None) -> dict[str, torch.Tensor]:
        """Returns (B images, Q queries, C classes, A attributes; boxes normalised to the input):

        obstacles.logits [B,Q,C]     class logits (sigmoid; no background class)
        obstacles.boxes [B,Q,4]      2D box cxcywh in [0, 1]
        obstacles.center [B,Q,2]     projected 3D centre (u, v) in [0, 1]
        obstacles.depth [B,Q]        depth code (see obstacle_coding)
        obstacles.depth_log_scale [B,Q]  with depth_uncertainty: log of the Laplace scale of the depth code
        obstacles.size [B,Q,3]       log (w, l, h) metres
        obstacles.yaw [B,Q,2]        (sin, cos) of yaw_cam (with yaw_bins: the most likely bin's heading;
                                     training adds obstacles.yaw_bin_logits [B,Q,K], obstacles.yaw_per_bin [B,Q,K,2])
        obstacles.velocity [B,Q,2]   (v_x, v_z) m/s, camera frame
        obstacles.bottom [B,Q]       with ground_keypoint: row v of the projected bottom centre in [0, 1]
        obstacles.attribute [B,Q,A]  attribute logits
        In training also ``obstacles.aux{i}.*`` per earlier decoder layer and
        ``obstacles.enc.{logits,boxes}`` for the selected token proposals, ``obstacles.dense.*`` for every token (with
        ``dense_depth`` also ``obstacles.dense.depth`` [B,N], the depth code) (and with ``denoising`` targets,
        ``obstacles.dn{i}.*`` and ``obstacles.dn.index``: ``denoising.py``).
        """
        return super().forward(levels, denoising)
