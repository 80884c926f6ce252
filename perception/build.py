"""Where a validated config turns into the parts: model, criteria, data. The engine
(``perception.training.assembly``) puts them into a LightningModule."""

from __future__ import annotations

from perception.config import ExperimentConfig, ModelConfig, MotionExperimentConfig


def build_model(cfg: ModelConfig, input_size: tuple[int, int]):
    from perception.models.backbone import SwinBackbone
    from perception.models.fpn import FPN
    from perception.models.heads.drivable import DrivableHead
    from perception.models.heads.lanes import LaneHead
    from perception.models.heads.lights import LightHead
    from perception.models.heads.obstacles import ObstacleHead
    from perception.models.perception_model import PerceptionModel

    b = cfg.backbone
    overrides = {k: v for k, v in dict(embed_dim=b.embed_dim, depths=b.depths, num_heads=b.num_heads,
                                       window_size=b.window_size).items() if v is not None}
    backbone = SwinBackbone(b.name, input_size, pretrained_path=b.pretrained_path, drop_path_rate=b.drop_path_rate,
                            **overrides)
    neck = FPN(backbone.channels, cfg.neck.channels)
    heads = {}
    if cfg.heads.drivable is not None:
        heads["drivable"] = DrivableHead(neck.channels, cfg.heads.drivable.channels, cfg.heads.drivable.num_classes)
    if cfg.heads.obstacles is not None:
        o = cfg.heads.obstacles
        heads["obstacles"] = ObstacleHead(neck.channels, **o.decoder_kwargs(),
                                          input_height=input_size[0] if o.geometric_depth else None)
    if cfg.heads.lanes is not None:
        heads["lanes"] = LaneHead(neck.channels, num_points=cfg.heads.lanes.num_points,
                                  **cfg.heads.lanes.decoder_kwargs())
    if cfg.heads.lights is not None:
        heads["lights"] = LightHead(neck.channels, **cfg.heads.lights.decoder_kwargs())
    if not heads:
        raise ValueError("model.heads enables no head")
    return PerceptionModel(backbone, neck, heads)


def build_criteria(cfg: ExperimentConfig) -> dict:
    from perception.losses.box_set_loss import LightCriterion
    from perception.losses.drivable_loss import DrivableCriterion
    from perception.losses.lane_loss import LaneCriterion, LaneMatcher
    from perception.losses.matcher import HungarianMatcher
    from perception.losses.obstacle_loss import ObstacleCriterion

    criteria, heads, m = {}, cfg.model.heads, cfg.matcher
    dense = dict(dense_weight=m.dense_weight, dense_class_positives=m.dense_class_positives)
    if heads.drivable is not None:
        criteria["drivable"] = DrivableCriterion()
    if heads.obstacles is not None:
        criteria["obstacles"] = ObstacleCriterion(HungarianMatcher(m.cost_class, m.cost_bbox, m.cost_giou), **dense)
    if heads.lanes is not None:
        criteria["lanes"] = LaneCriterion(LaneMatcher(m.cost_class, m.cost_points), **dense)
    if heads.lights is not None:
        criteria["lights"] = LightCriterion(HungarianMatcher(m.cost_class, m.cost_bbox, m.cost_giou), **dense)
    return criteria


def build_datamodule(cfg: ExperimentConfig | MotionExperimentConfig):
    if isinstance(cfg, MotionExperimentConfig):
        from perception.data.motion_datamodule import MotionDataModule

        return MotionDataModule(cfg.data_root, cfg.version, cfg.train_split, cfg.val_split, motion_settings(cfg),
                                cfg.data.use_map, cfg.batch_size, cfg.val_batch_size, cfg.num_workers,
                                cfg.cache_root, cfg.data.mirror_prob, cfg.seed)
    from perception.data.datamodule import NuScenesDataModule

    return NuScenesDataModule(
        data_root=cfg.data_root, version=cfg.version, train_split=cfg.train_split, val_split=cfg.val_split,
        cameras=list(cfg.cameras), input_size=tuple(cfg.input_size), batch_size=cfg.batch_size,
        val_batch_size=cfg.val_batch_size, num_workers=cfg.num_workers, cache_root=cfg.cache_root,
        drivable_max_range=cfg.drivable_max_range, scale_range=cfg.augment.scale_range,
        flip_prob=cfg.augment.flip_prob, photometric=cfg.augment.photometric, seed=cfg.seed, bdd100k=cfg.bdd100k,
        lane_cameras=cfg.lane_cameras, min_visibility=cfg.min_obstacle_visibility)


def motion_settings(cfg: MotionExperimentConfig):
    from perception.data.motion_samples import MotionDataSettings

    d = cfg.data
    return MotionDataSettings(past_seconds=d.past_seconds, future_seconds=d.future_seconds, map_radius=d.map_radius,
                              max_lanes=d.max_lanes, lane_points=d.lane_points, lane_resolution=d.lane_resolution)


def build_motion_model(cfg: MotionExperimentConfig):
    from perception.models.trajectory_transformer import TrajectoryTransformer

    settings, m = motion_settings(cfg), cfg.model
    return TrajectoryTransformer(past_steps=settings.past_steps, future_steps=settings.future_steps,
                                 lane_points=settings.lane_points, dim=m.dim, num_heads=m.num_heads,
                                 ffn_dim=m.ffn_dim, encoder_layers=m.encoder_layers,
                                 decoder_layers=m.decoder_layers, num_modes=m.num_modes, dropout=m.dropout)
