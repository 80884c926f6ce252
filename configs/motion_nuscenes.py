# Trajectory forecasting on real nuScenes: the prediction challenge's agents
# (maps/prediction/prediction_scenes.json from the nuScenes-prediction download), split
# "train" (the official train scenes minus the first 200, which form "train_val") and "val".
# For v1.0-mini use version="v1.0-mini", train_split="mini_train", val_split="mini_val".
_base_ = ["motion_synthetic.py"]

data_root = "data/nuscenes"
version = "v1.0-trainval"
train_split = "train"
val_split = "val"

model = dict(dim=128, num_heads=8, ffn_dim=512, encoder_layers=3, decoder_layers=3, num_modes=10, dropout=0.1)
batch_size = 128
num_workers = 4
optimizer = dict(lr=5e-4, weight_decay=0.01)
scheduler = dict(warmup_steps=500)
trainer = dict(max_steps=-1, max_epochs=40, accelerator="auto", devices=1, precision="32-true",
               val_check_interval=None, check_val_every_n_epoch=1, log_every_n_steps=50)
