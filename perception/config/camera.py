"""Camera perception configs: model (backbone, neck, one head config per task spec), data, matcher,
post-processing, and their checks. ``model.heads`` has one field per task of the tuple it is parsed for."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from perception.config.common import (
    FaultsConfig,
    OptimizerConfig,
    SchedulerConfig,
    _validate_training,
    is_number,
)
from perception.core.errors import ConfigError
from perception.core.nuscenes_constants import CAMERAS
from perception.tasks import CAMERA_TASKS


@dataclass
class BackboneConfig:
    name: str = "swin_tiny_patch4_window7_224"
    pretrained_path: str | None = None  # local timm checkpoint; never downloaded
    drop_path_rate: float = 0.1
    # "patch": Swin's 4x4 patchify convolution; "conv": two stride-2 3x3 convolutions (perception.models.conv_stem)
    stem: str = "patch"
    # Architecture overrides passed to timm (None keeps the named model's value).
    embed_dim: int | None = None
    depths: tuple | None = None
    num_heads: tuple | None = None
    window_size: int | list | None = None  # one int, or [height, width] (configs/swin_deploy_nuscenes_bdd100k.py)
    # How window attention is written in an exported ONNX graph: "per_head" (no q/k/v split transposes; faster in
    # ONNX Runtime, perception/models/window_attention.py) or "batched" (timm's form). Training is identical.
    onnx_window_attention: str = "per_head"


@dataclass
class NeckConfig:
    channels: int = 96


def heads_config_class(tasks: tuple) -> type:
    """The ``model.heads`` dataclass of a task tuple: one field per task, its head config or None (off).

    ``enabled`` lists the specs of the heads that are on, in the tuple's order."""
    if tasks not in _HEADS_CLASSES:
        fields = [(t.name, t.config_class | None, field(default_factory=t.config_class) if t.enabled_by_default
                   else field(default=None)) for t in tasks]
        enabled = property(lambda self: tuple(t for t in tasks if getattr(self, t.name) is not None))
        _HEADS_CLASSES[tasks] = dataclasses.make_dataclass("HeadsConfig", fields,
                                                           namespace={"tasks": tasks, "enabled": enabled})
    return _HEADS_CLASSES[tasks]


_HEADS_CLASSES: dict[tuple, type] = {}
HeadsConfig = heads_config_class(CAMERA_TASKS)


@dataclass
class MatcherConfig:
    cost_class: float = 2.0
    cost_bbox: float = 5.0
    cost_giou: float = 2.0
    cost_points: float = 5.0  # lanes: mean L1 of x over the target's visible rows
    # Weight of the dense one-to-many losses on every memory token (perception.losses.dense_assign),
    # added to the set losses of the same names; trains query selection. 0 turns them off.
    dense_weight: float = 1.0
    # "all": every token the assigner picks is a class positive; "one": only each object's best token
    # is (the others still regress but are left out of the class loss), so query selection is not
    # filled with duplicates of one object.
    dense_class_positives: str = "all"
    # Box heads (obstacles, lights): a matched query's class target is its box IoU with the object (varifocal
    # loss, RT-DETR) instead of 1, so scores rank queries by localisation too (bench/convergence.py iou_aware).
    iou_aware_classification: bool = False
    # Obstacles: every query whose 2D box overlaps an object by IoU >= this is a class positive, not only its
    # Hungarian match (DETA, "NMS strikes back"); pair it with postprocess.obstacle_nms_iou, which removes the
    # duplicates this leaves (the cameras' BEV merge catches only those within a merge radius). None: off.
    obstacle_one_to_many_iou: float | None = None
    # Obstacles, with obstacle_one_to_many_iou: those queries also regress the object they overlap (2D box, depth,
    # size, heading, ...), averaged over them and added at this weight to the one-to-one regression losses
    # (H-DETR's one-to-many branch on the same queries). 0: off.
    obstacle_one_to_many_regression: float = 0.0
    # Traffic lights: the same one-to-many class targets for the light head; pair it with postprocess.light_nms_iou.
    light_one_to_many_iou: float | None = None
    # Lanes: every decoder query whose lane overlaps a labelled lane by this IoU (the F1's 30/1640-px lines, at the
    # row anchors: perception.core.lane_overlap) is a class positive too; pair it with postprocess.lane_nms_iou.
    lane_one_to_many_iou: float | None = None
    # Lanes, with lane_one_to_many_iou: those queries also regress the lane they overlap (points, visibility, row
    # classification), averaged over them, at this weight beside the one-to-one losses. 0: off.
    lane_one_to_many_regression: float = 0.0
    # Lanes, with lane_one_to_many_iou: class positives target their lane's overlap with the labelled one (the F1's IoU
    # at the rows) instead of 1, a quality focal loss (IoU-aware classification) so that scores rank lanes by how well
    # they fit: "all" every decoder class positive, "one_to_many" only the one-to-many ones (the Hungarian matches keep
    # 1). None: binary targets.
    lane_quality_targets: str | None = None


@dataclass
class PostprocessConfig:
    obstacle_max_per_image: int = 100
    obstacle_score_threshold: float = 0.05
    obstacle_nms_iou: float | None = None  # per-camera, per-class 2D NMS before 3D decoding; None: NMS-free
    # The sample's boxes (all cameras) are de-duplicated in BEV: a box within its class's merge radius (car 1.5 m,
    # pedestrian 0.5 m, ...: postprocess/obstacles.py MERGE_RADIUS) of a higher-scoring box of its class is dropped;
    # this scales those radii (the demo: 3, convergence study, obstacle_merge_radius_scale).
    obstacle_merge_radius_scale: float = 1.0
    # With model.heads.obstacles.depth_uncertainty: score = class score x P(depth within 1 m); False: class score only.
    # Off: on the 10-scene held-out split it cost mAP (0.043 vs 0.069 on the same checkpoint; convergence study).
    obstacle_depth_confidence: bool = False
    # With model.heads.obstacles.ground_keypoint: each box's depth also from where its bottom centre meets the ground
    # (the camera's height over nuScenes' ego ground plane, z = 0), fused with the regressed depth by inverse variance:
    # the ground depth's relative error taken as z x obstacle_bottom_px_error / (fy x camera height), the regression's
    # as obstacle_depth_relative_error. False: the regressed depth only.
    obstacle_ground_depth: bool = False
    obstacle_bottom_px_error: float = 1.0  # input px
    obstacle_depth_relative_error: float = 0.08
    lane_score_threshold: float = 0.3  # lane F1 is measured at this one operating point
    lane_visibility_threshold: float = 0.5
    # Put each lane's rows on a robust straight line (Huber scale in input px; postprocess/lane_fit.py); None: as
    # the head placed them. The F1's IoU of 0.5 allows about 2.7 input px at 448 px wide.
    lane_line_fit_px: float | None = None
    # With lane_line_fit_px: fit x = a + b y + c / (y - h) instead of a line, h this row in [0, 1] of the input height
    # (the image of a lane curving on flat ground; for a head with model.heads.lanes.horizon_row). None: a line.
    lane_fit_horizon_row: float | None = None
    # Greedy NMS of the kept lanes by their overlap at the row anchors (perception.core.lane_overlap), for a head
    # trained with matcher.lane_one_to_many_iou, whose duplicate queries on one lane score alike; None: NMS-free.
    lane_nms_iou: float | None = None
    # Where the lane head's anchor rows start, a fraction of the input height: set from model.heads.lanes.row_top
    # (leave it unset; a different value is an error). Here so that decoding, and the ONNX sidecar, carry it.
    lane_row_top: float | None = None
    light_max_per_image: int = 30
    light_score_threshold: float = 0.05
    light_nms_iou: float | None = None  # per-class 2D NMS of the light boxes; None: NMS-free


@dataclass
class Bdd100kConfig:
    """A BDD100K-format dataset mixed into training (perception.data.bdd100k has the layout)."""

    data_root: str
    train_split: str = "train"
    val_split: str = "val"
    # Fraction of training items drawn from BDD100K; the rest come from nuScenes.
    sample_fraction: float = 0.5


@dataclass
class ModelConfig:
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    neck: NeckConfig = field(default_factory=NeckConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    # Training only: head name -> factor on the gradient that head sends into the shared backbone and FPN
    # (models/gradient_scale.py); e.g. dict(lights=0.1). Heads not named keep 1. The forward pass is unchanged.
    trunk_gradient_scale: dict = field(default_factory=dict)
    # Heads that read a feature pyramid of their own (a second FPN, model.neck's width, on the backbone's features)
    # instead of the shared one: they share only the backbone with the other heads. E.g. ["lanes"].
    own_necks: list = field(default_factory=list)
    # Training only: each head's gradient into the trunk (its levels, the whole batch) rescaled to this L2 norm at
    # every step, before trunk_gradient_scale; None keeps the loss's own size (models/gradient_scale.py).
    trunk_gradient_norm: float | None = None


@dataclass
class AugmentConfig:
    scale_range: tuple = (0.9, 1.15)
    flip_prob: float = 0.5
    photometric: bool = True
    # Hue shift range of the photometric jitter, in turns of the colour wheel: each training image's hue is rotated by
    # a uniform draw in [-hue, hue] (torchvision's ColorJitter convention; 0.03 = +-11 degrees).
    hue: float = 0.03
    # Crop each training image so that its principal point lands on the row it has in evaluation (as far as the
    # resized image reaches): the row of an object's foot then means the same depth in every crop. Off: the crop
    # is drawn within 15 % of the input height above the bottom (perception.data.transforms).
    keep_principal_row: bool = False


@dataclass
class ExperimentConfig:
    """Camera perception (drivable area, obstacles, lanes, traffic lights): the default task."""

    data_root: str
    version: str
    train_split: str
    val_split: str
    input_size: tuple  # (H, W) of the network input
    cameras: tuple = CAMERAS
    cache_root: str | None = None  # default <data_root>/perception_cache
    drivable_max_range: float = 60.0
    bdd100k: Bdd100kConfig | None = None  # None: nuScenes only
    # nuScenes cameras whose map-derived lanes are supervised and scored (markings run away from
    # them); in the others lanes count as unlabelled (perception.data.camera_dataset).
    lane_cameras: tuple = ("CAM_FRONT", "CAM_BACK")
    # Obstacle targets of which a camera sees less than this fraction (occlusion by nearer annotated
    # boxes, perception.data.occlusion) are dropped from that camera's targets; evaluation is unaffected.
    min_obstacle_visibility: float = 0.2
    batch_size: int = 2
    val_batch_size: int = 4
    num_workers: int = 4
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss_weights: dict = field(default_factory=lambda: {"drivable_ce": 1.0, "drivable_dice": 1.0})
    matcher: MatcherConfig = field(default_factory=MatcherConfig)
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    trainer: dict = field(default_factory=dict)  # lightning.Trainer arguments
    # Score the held-out validation split (tools/test.py's metrics) every N steps and at the end of
    # training, logged as heldout/* and drawn into <work_dir>/curves.png (0: only val/* is logged).
    heldout_eval_every_n_steps: int = 0
    checkpoint_every_n_steps: int = 0  # also write last.ckpt every N steps (0: off)
    checkpoint_every_n_minutes: float = 10.0  # also write last.ckpt every N minutes of training (0: off)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    seed: int = 0
    task: str = "perception"


def validate(cfg: ExperimentConfig) -> None:
    """Reject values that would only fail (or silently misbehave) later."""
    _validate_training(cfg)
    height, width = cfg.input_size
    if height % 32 or width % 32 or height <= 0 or width <= 0:
        raise ConfigError(f"input_size {list(cfg.input_size)} must be positive multiples of 32 (Swin patch 4 x "
                          "three 2x merges); multiples of 224 avoid window padding, e.g. [448, 896]")
    unknown = [c for c in list(cfg.cameras) + list(cfg.lane_cameras) if c not in CAMERAS]
    if unknown:
        raise ConfigError(f"unknown cameras {unknown}; nuScenes cameras are {list(CAMERAS)}")
    for key in ("postprocess.obstacle_nms_iou", "postprocess.light_nms_iou", "postprocess.lane_nms_iou",
                "matcher.obstacle_one_to_many_iou", "matcher.light_one_to_many_iou", "matcher.lane_one_to_many_iou"):
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and not 0.0 < value <= 1.0:
            raise ConfigError(f"{key} must be in (0, 1] or None, got {value!r}")
        if key in ("matcher.obstacle_one_to_many_iou", "matcher.light_one_to_many_iou") and value is not None \
                and cfg.matcher.iou_aware_classification:
            raise ConfigError(f"{key} and matcher.iou_aware_classification are alternatives for the box heads' "
                              "class targets: set one of them")
    scale = cfg.postprocess.obstacle_merge_radius_scale
    if not is_number(scale) or not 0.0 < scale <= 10.0:
        raise ConfigError(f"postprocess.obstacle_merge_radius_scale must be a number in (0, 10] (1: the class radii "
                          f"as they are), got {scale!r}")
    for task in ("obstacle", "lane"):
        regression = getattr(cfg.matcher, f"{task}_one_to_many_regression")
        if not is_number(regression) or regression < 0:
            raise ConfigError(f"matcher.{task}_one_to_many_regression must be a weight >= 0, got {regression!r}")
        if regression and getattr(cfg.matcher, f"{task}_one_to_many_iou") is None:
            raise ConfigError(f"matcher.{task}_one_to_many_regression regresses the one-to-many queries: set "
                              f"matcher.{task}_one_to_many_iou too")
    if cfg.matcher.lane_quality_targets not in (None, "all", "one_to_many"):
        raise ConfigError(f"matcher.lane_quality_targets must be None, 'all' or 'one_to_many', got "
                          f"{cfg.matcher.lane_quality_targets!r}")
    if cfg.matcher.lane_quality_targets and cfg.matcher.lane_one_to_many_iou is None:
        raise ConfigError("matcher.lane_quality_targets scores the one-to-many lane positives: set "
                          "matcher.lane_one_to_many_iou too")
    horizon = cfg.postprocess.lane_fit_horizon_row
    if horizon is not None and (cfg.postprocess.lane_line_fit_px is None or not 0.0 <= horizon < 1.0):
        raise ConfigError(f"postprocess.lane_fit_horizon_row must be in [0, 1) of the input height and needs "
                          f"postprocess.lane_line_fit_px, got {horizon!r} with lane_line_fit_px="
                          f"{cfg.postprocess.lane_line_fit_px!r}")
    if cfg.postprocess.lane_line_fit_px is not None and not cfg.postprocess.lane_line_fit_px > 0:
        raise ConfigError(f"postprocess.lane_line_fit_px must be > 0 (input px) or None, got "
                          f"{cfg.postprocess.lane_line_fit_px!r}")
    backbone = cfg.model.backbone
    if backbone.stem not in ("patch", "conv"):
        raise ConfigError(f"model.backbone.stem must be 'patch' or 'conv', got {backbone.stem!r}")
    if backbone.stem != "patch" and backbone.pretrained_path:
        raise ConfigError(f"model.backbone.stem={backbone.stem!r} has no pretrained weights: set stem='patch' to load "
                          f"model.backbone.pretrained_path ({backbone.pretrained_path}), or drop the path")
    if cfg.matcher.dense_class_positives not in ("all", "one"):
        raise ConfigError(f"matcher.dense_class_positives must be 'all' or 'one', got "
                          f"{cfg.matcher.dense_class_positives!r}")
    if not 0.0 <= cfg.min_obstacle_visibility < 1.0:
        raise ConfigError(f"min_obstacle_visibility must be in [0, 1), got {cfg.min_obstacle_visibility}")
    if not 0.0 <= cfg.augment.hue <= 0.5:
        raise ConfigError(f"augment.hue must be within [0, 0.5] (turns of the colour wheel), got {cfg.augment.hue}")
    low, high = cfg.augment.scale_range
    if not 0 < low <= high:
        raise ConfigError(f"augment.scale_range must be 0 < low <= high, got {cfg.augment.scale_range}")
    for task in cfg.model.heads.enabled:
        task.validate(getattr(cfg.model.heads, task.name), cfg)
    enabled = [task.name for task in cfg.model.heads.enabled]
    for name, factor in cfg.model.trunk_gradient_scale.items():
        if name not in enabled:
            raise ConfigError(f"model.trunk_gradient_scale has key {name!r}, which is not an enabled head; "
                              f"enabled heads are {enabled}")
        if not is_number(factor) or not 0.0 <= factor <= 10.0:
            raise ConfigError(f"model.trunk_gradient_scale.{name} must be a number in [0, 10], got {factor!r}")
    norm = cfg.model.trunk_gradient_norm
    if norm is not None and (not is_number(norm) or not 0.0 < norm <= 100.0):
        raise ConfigError(f"model.trunk_gradient_norm must be None or a number in (0, 100], got {norm!r}")
    # A disabled head in the list is fine (a config that turns a head off inherits the list); a name no head
    # has is a typo.
    clip = cfg.optimizer.clip_per_part
    heads = [task.name for task in cfg.model.heads.tasks]
    own = cfg.model.own_necks
    if not isinstance(own, (list, tuple)) or [name for name in own if name not in heads]:
        raise ConfigError(f"model.own_necks must be a list of head names (heads are {heads}), got {own!r}")
    unknown = [name for name in clip if name not in heads] if isinstance(clip, (list, tuple)) else []
    if unknown:
        raise ConfigError(f"optimizer.clip_per_part lists {unknown}, which are not heads; heads are {heads}")
    unknown = [name for name in (cfg.optimizer.head_betas or {}) if name not in heads]
    if unknown:
        raise ConfigError(f"optimizer.head_betas has keys {unknown}, which are not heads; heads are {heads}")
    if not cfg.model.heads.enabled:
        raise ConfigError("model.heads enables no head; set at least one of "
                          f"{[t.name for t in cfg.model.heads.tasks]}")
    if cfg.bdd100k is not None and not 0 <= cfg.bdd100k.sample_fraction <= 1:
        raise ConfigError(f"bdd100k.sample_fraction must be in [0, 1], got {cfg.bdd100k.sample_fraction}")
