# Swin-T multi-task model on nuScenes v1.0-trainval at 448x896, 24 epochs.
#   python tools/train.py configs/swin_t_nuscenes.py --cfg-options data_root=/data/nuscenes
# v1.0-mini: --cfg-options version=v1.0-mini train_split=mini_train val_split=mini_val
_base_ = ["_base_/model_swin_t.py", "_base_/data_nuscenes.py", "_base_/schedule_24e.py"]
