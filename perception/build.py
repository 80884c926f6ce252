"""Where a validated config turns into the parts: model, criteria, data. The engine
(``perception.training.assembly``) puts them into a LightningModule."""

from __future__ import annotations

from perception.config import ExperimentConfig, ModelConfig, MotionExperimentConfig


def build_model(cfg: ModelConfig, input_size: tuple[int, int]):
    """Backbone, neck and the head of every enabled task (``cfg.heads.enabled``), in the task tuple's order."""
    from perception.models.backbone import SwinBackbone
    from perception.models.fpn import FPN
    from perception.models.perception_model import PerceptionModel

    b = cfg.backbone
    overrides = {k: v for k, v in dict(embed_dim=b.embed_dim, depths=b.depths, num_heads=b.num_heads,
                                       window_size=b.window_size).items() if v is not None}
    backbone = SwinBackbone(b.name, input_size, pretrained_path=b.pretrained_path, drop_path_rate=b.drop_path_rate,
                            stem=b.stem, onnx_window_attention=b.onnx_window_attention, **overrides)
    neck = FPN(backbone.channels, cfg.neck.channels)
    heads = {task.name: task.build_head(getattr(cfg.heads, task.name), neck.channels, tuple(input_size))
             for task in cfg.heads.enabled}
    if not heads:
        raise ValueError("model.heads enables no head")
    # A neck computes only the levels its readers say they read (``input_levels``); a reader that does not say
    # keeps the full pyramid. Pruned after building it in full, so the random draws stay the same.
    own_necks = {name: FPN(backbone.channels, cfg.neck.channels, out_levels=read_levels([heads[name]]))
                 for name in cfg.own_necks if name in heads}
    shared_levels = read_levels([head for name, head in heads.items() if name not in own_necks])
    if shared_levels:  # None: a reader that does not say; (): every head has a neck of its own
        neck.keep_levels(shared_levels)
    return PerceptionModel(backbone, neck, heads, cfg.trunk_gradient_scale, own_necks, cfg.trunk_gradient_norm)


def read_levels(heads) -> tuple[int, ...] | None:
    """The FPN levels these heads read together; None (every level) when one of them does not say."""
    if not all(hasattr(head, "input_levels") for head in heads):
        return None
    return tuple(sorted({level for head in heads for level in head.input_levels()}))


def build_criteria(cfg: ExperimentConfig) -> dict:
    """One criterion per enabled task: ``(outputs, targets) -> {loss name: value}``."""
    return {task.name: task.build_criterion(cfg) for task in cfg.model.heads.enabled}


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
        flip_prob=cfg.augment.flip_prob, photometric=cfg.augment.photometric, hue=cfg.augment.hue,
        keep_principal_row=cfg.augment.keep_principal_row, seed=cfg.seed, bdd100k=cfg.bdd100k,
        lane_cameras=cfg.lane_cameras, min_visibility=cfg.min_obstacle_visibility, tasks=cfg.model.heads.tasks)


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
