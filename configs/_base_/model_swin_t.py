# Swin-T backbone + FPN + drivable-area head + DETR-style heads for 3D obstacles and lanes
# (traffic lights need BDD100K-format data: configs/swin_t_nuscenes_bdd100k.py). The neck is kept
# at 96 channels so that the backbone dominates the cost (an FPN with 256 channels at stride 4
# costs more than Swin-T itself).
model = dict(
    backbone=dict(name="swin_tiny_patch4_window7_224", pretrained_path=None, drop_path_rate=0.2),
    neck=dict(channels=96),
    heads=dict(
        drivable=dict(channels=64, num_classes=2),
        obstacles=dict(dim=128, num_queries=100, num_layers=3, num_heads=4, ffn_dim=512, levels=[1, 2, 3],
                       cross_attention="deformable"),
        lanes=dict(dim=128, num_queries=30, num_layers=3, num_heads=4, ffn_dim=512, num_points=36, levels=[1, 2, 3]),
        lights=None,
    ),
)
loss_weights = dict(
    drivable_ce=1.0, drivable_dice=1.0,
    obstacle_cls=2.0, obstacle_l1=5.0, obstacle_giou=2.0, obstacle_center=5.0, obstacle_depth=1.0,
    obstacle_size=1.0, obstacle_yaw=1.0, obstacle_velocity=0.2, obstacle_attribute=0.5, obstacle_bottom=5.0,
    lane_cls=2.0, lane_points=5.0, lane_visibility=1.0, lane_mask=1.0,
    light_cls=2.0, light_l1=5.0, light_giou=2.0,
)
matcher = dict(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0, cost_points=5.0)
postprocess = dict(obstacle_max_per_image=100, obstacle_score_threshold=0.05, lane_score_threshold=0.3,
                   lane_visibility_threshold=0.5, light_max_per_image=30, light_score_threshold=0.05)
