# Trajectory forecasting (encoder-decoder Transformer) on the synthetic nuScenes-format motion
# data written by `make motion-data` (16 scenes x 20 s, no camera images). Past 2 s -> future 6 s
# at 2 Hz, 5 modes, lane centrelines within 50 m as map tokens. About 3 minutes on 2 CPU cores.
task = "motion"
data_root = "data/synthetic_motion"
version = "v1.0-trainval"
train_split = "synthetic_train"
val_split = "synthetic_val"

data = dict(past_seconds=2.0, future_seconds=6.0, use_map=True, map_radius=50.0, max_lanes=32, lane_points=10,
            lane_resolution=2.0, mirror_prob=0.5)
model = dict(dim=64, num_heads=4, ffn_dim=256, encoder_layers=2, decoder_layers=2, num_modes=5, dropout=0.0)
loss_weights = dict(motion_reg=1.0, motion_reg_self_fed=1.0, motion_cls=0.5)
batch_size = 64
val_batch_size = 256
num_workers = 0

optimizer = dict(lr=1e-3, weight_decay=0.01, backbone_lr_mult=1.0)
scheduler = dict(warmup_steps=100, warmup_ratio=0.01, min_lr_ratio=0.02)
trainer = dict(
    max_steps=600,
    max_epochs=-1,
    accelerator="cpu",
    devices=1,
    precision="32-true",
    gradient_clip_val=1.0,
    log_every_n_steps=20,
    check_val_every_n_epoch=None,
    val_check_interval=200,
)
