# Swin-T backbone + FPN + drivable-area head. The neck is kept at 96 channels so that the
# backbone dominates the cost (an FPN with 256 channels at stride 4 costs more than Swin-T).
model = dict(
    backbone=dict(name="swin_tiny_patch4_window7_224", pretrained_path=None, drop_path_rate=0.2),
    neck=dict(channels=96),
    heads=dict(drivable=dict(channels=64, num_classes=2)),
)
loss_weights = dict(drivable_ce=1.0, drivable_dice=1.0)
