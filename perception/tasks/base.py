"""What a camera task is, in one place: the base every task spec (``perception.tasks.<name>``) fills in.

The config, the model and criteria builders, the datasets' targets and collation, the Lightning
system's validation metric, the evaluation, the inference pipeline, the drawing, the export's checks
and the sidecar iterate over one plain tuple of specs (``perception.tasks.CAMERA_TASKS``, or the
enabled ones: ``cfg.model.heads.enabled``) and never name a task. What still knows the four shipped
tasks: the HTML report's per-task sections and each dataset's ``read_labels`` (which labels take the
transform's geometric slots). A spec is stateless; everything it builds comes from the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from perception.core.errors import ConfigError
from perception.losses.matcher import HungarianMatcher
from perception.models.heads.query_decoder import CROSS_ATTENTION


@dataclass
class ScoringContext:
    """What a task's split-level scoring may need beyond the per-image results (rank 0, after gathering)."""

    cfg: object  # the ExperimentConfig
    sources: list  # the evaluated datasets; sources[0] is the nuScenes split
    split: str
    work_dir: str
    format_only: bool = False  # write submission files, skip the scorers that read them
    results_path: str | None = None
    plot_dir: str | None = None
    timings: dict = field(default_factory=dict)  # seconds by phase: postprocess_s, devkit_s


class Task:
    """One camera task. Subclasses set the class attributes and override what their task does."""

    name: str = ""  # key of the head, its outputs ("<name>.<output>"), targets, losses and metrics
    config_class: type | None = None  # the head's config dataclass (``model.heads.<name>``)
    enabled_by_default: bool = False  # a config that does not mention the head gets its default config
    labelled_datasets: tuple[str, ...] = ()  # datasets whose items can carry this task's labels
    loss_names: tuple[str, ...] = ()  # what the criterion returns (keys of ``loss_weights``)
    output_meanings: dict[str, str] = {}  # exported output name -> what it holds (the sidecar)
    class_names: dict[str, list[str]] = {}  # the sidecar's class lists of this task
    postprocess_code: str = ""  # where the post-processing of the exported outputs lives (the sidecar)
    query_outputs: bool = False  # outputs are per query [B,Q,...]: export parity may compare them as a set
    int8_float: bool = False  # keep this head in float in the INT8 graph (measured sensitivity)

    # --- config ---------------------------------------------------------------------------------
    def validate(self, head, cfg) -> None:
        """Reject head settings (``head``: config_class instance) that would only fail later."""

    # --- model and training ---------------------------------------------------------------------
    def build_head(self, head, in_channels: int, input_size: tuple[int, int]) -> nn.Module:
        raise NotImplementedError

    def build_criterion(self, cfg) -> nn.Module:
        """A module ``(outputs, targets) -> {loss name: value}`` with ``loss_names``."""
        raise NotImplementedError

    def empty_targets(self) -> dict:
        """Targets of an image without this task's labels (``valid`` False)."""
        return {"valid": False}

    def item_targets(self, dataset, info: dict, out: dict) -> dict | None:
        """This task's targets of one transformed item (``out``: the CameraTransform's result, input
        pixels) of ``dataset`` (its ``name`` says which format), or None when the item has no labels."""
        return None

    def collate(self, targets: list[dict], input_size: tuple[int, int]) -> dict:
        """Per-image targets -> the batch's: sparse by default (a list per image and ``valid`` [B])."""
        return {"valid": torch.tensor([bool(t["valid"]) for t in targets]), "per_image": list(targets),
                "input_size": tuple(input_size)}

    def validation_metric(self):
        """A metric for Lightning's validation (``update(outputs, targets)``, ``compute() -> float``,
        ``reset()``, ``name``, ``mode``), or None. The first enabled task that has one picks best.ckpt."""
        return None

    # --- inference ------------------------------------------------------------------------------
    def decode(self, outputs: dict, i: int, input_size: tuple[int, int], affine: np.ndarray,
               orig_size: tuple[int, int], post, input_intrinsics: np.ndarray | None = None):
        """Image ``i``'s result in original pixels (or the camera frame). ``affine``: original -> input px;
        ``orig_size``: (W, H) of the original image; ``post``: the config's PostprocessConfig;
        ``input_intrinsics``: the camera's [3,3] intrinsics in input pixels (affine @ K)."""
        raise NotImplementedError

    def draw(self, canvas: np.ndarray, prediction, intrinsics: np.ndarray, min_score: float) -> None:
        """Draw ``decode``'s result onto the uint8 RGB image (original pixels; ``intrinsics`` [3,3] of it)."""

    def bev_entries(self, prediction, min_score: float) -> list:
        """Entries of the top-down panel (perception.drawing.bev_panel) from ``decode``'s result."""
        return []

    # --- evaluation -----------------------------------------------------------------------------
    def image_result(self, cfg, dataset, outputs: dict, i: int, meta: dict, info: dict | None) -> dict:
        """What scoring needs from image ``i`` (merged into the image's result; keys unique to the task).
        ``info``: the image's label record in report mode (per-frame diagnostics), else None."""
        return {}

    def score(self, results: list[dict], context: ScoringContext) -> dict[str, float]:
        """Split metrics ``<task>/<metric>`` from every image's result."""
        return {}


def box_set_criterion(criterion_class: type, matcher, **options) -> nn.Module:
    """A box head's set criterion (``criterion_class``: ObstacleCriterion, LightCriterion) from the config's
    ``matcher``: Hungarian costs, the dense token loss and IoU-aware class targets; ``options``: the head's own
    (e.g. ``one_to_many_iou``)."""
    return criterion_class(HungarianMatcher(matcher.cost_class, matcher.cost_bbox, matcher.cost_giou),
                           dense_weight=matcher.dense_weight, dense_class_positives=matcher.dense_class_positives,
                           iou_aware=matcher.iou_aware_classification, **options)


def validate_query_head(name: str, head) -> None:
    """Checks every DETR-style head shares: FPN levels and the attention width."""
    if not set(head.levels) <= {0, 1, 2, 3} or not head.levels:
        raise ConfigError(f"model.heads.{name}.levels must be FPN levels 0-3, got {head.levels}")
    if head.dim % head.num_heads or head.dim % 8:
        raise ConfigError(f"model.heads.{name}.dim {head.dim} must be divisible by num_heads and 8")
    if head.cross_attention not in CROSS_ATTENTION:
        raise ConfigError(f"model.heads.{name}.cross_attention must be one of {CROSS_ATTENTION}, "
                          f"got {head.cross_attention!r}")


def validate_box_query_head(name: str, head) -> None:
    """``validate_query_head`` plus the box heads' denoising fields (``BoxQueryConfig``)."""
    validate_query_head(name, head)
    if head.denoising_queries < 0:
        raise ConfigError(f"model.heads.{name}.denoising_queries must be >= 0 (0 = off), got {head.denoising_queries}")
    for noise in ("denoising_box_noise", "denoising_label_noise"):
        if not 0.0 <= getattr(head, noise) <= 1.0:
            raise ConfigError(f"model.heads.{name}.{noise} must be in [0, 1], got {getattr(head, noise)}")
