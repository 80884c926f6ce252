# Swin-T, all four perception tasks: nuScenes (3D obstacles, map-derived lanes, drivable area)
# mixed with BDD100K (traffic lights with colour, lanes, drivable area). Each task's loss sees only
# the images that carry its labels; 40 % of the training images come from BDD100K.
#   python tools/train.py configs/swin_t_nuscenes_bdd100k.py \
#       --cfg-options data_root=/data/nuscenes bdd100k.data_root=/data/bdd100k
# BDD100K images are 1280x720: the same 448x896 input (resize to 896x504, keep the bottom rows).
_base_ = ["_base_/model_swin_t.py", "_base_/data_nuscenes.py", "_base_/schedule_24e.py"]

bdd100k = dict(data_root="data/bdd100k", train_split="train", val_split="val", sample_fraction=0.4)
# Lights at strides 8/16/32: at 448x896 the stride-4 level alone made the light head 13 % of the FLOPs and a
# third of the latency (bench/network_cost.py); a 20 px light still spans 2-3 stride-8 cells.
model = dict(heads=dict(lights=dict(_delete_=True, dim=128, num_queries=50, num_layers=3, num_heads=4, ffn_dim=512,
                                    levels=[1, 2, 3], cross_attention="deformable")))
