# nuScenes v1.0-trainval, six cameras. 1600x900 -> resize to 896x504 -> keep the bottom 448
# rows (the sky is dropped; the intrinsics follow). 448x896 is a multiple of Swin's 224 grid,
# so no window padding is wasted.
data_root = "data/nuscenes"
version = "v1.0-trainval"
train_split = "train"
val_split = "val"
cameras = ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT"]
input_size = [448, 896]  # H, W
cache_root = None  # default: <data_root>/perception_cache
drivable_max_range = 60.0
batch_size = 2  # per GPU
val_batch_size = 6
num_workers = 6
augment = dict(scale_range=[0.9, 1.15], flip_prob=0.5, photometric=True)
