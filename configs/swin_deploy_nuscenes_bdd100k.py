# Deployment-sized Swin: the four-task network of configs/swin_t_nuscenes_bdd100k.py with the same
# architecture (Swin stages, patch merging, FPN, the same four heads) at 2/3 of Swin-T's
# width (embed_dim 64) and one block per stage except three in stage 3, at 384x640: 14.2 GFLOPs
# (2 x MAC) for backbone + FPN + all four heads (bench/network_cost.py --config this file --batch 1;
# 14.4 counted in the exported graph), under the 18.5 GFLOPs of YOLOP, the lightest multi-task peer
# (its graph, counted the same way: perception.export.graph_flops); 16.7 in earlier versions, before
# the deformable box heads and the 6x10 windows below.
# Wide and shallow because it runs faster for the same FLOPs (ONNX Runtime, batch 1, 2 threads):
# Swin-T's depths 2-2-6-2 at embed_dim 48 cost 17.8 GFLOPs and ran 227 ms (0.56 of a same-run fp32
# matmul probe); this one 157 ms (0.64). Small per-head matmuls and memory-bound window shuffles,
# softmax, GELU and layer norms cost relatively more the narrower the network.
# The box heads use deformable cross-attention (no key projection over the 5040 memory tokens): 15.2 instead
# of 15.8 GFLOPs by torch.utils.flop_counter and about 4 % faster in ONNX Runtime (README, benchmarks).
# Windows of 6x10 tokens (60, against Swin's 7x7 = 49) tile all four stages at 384x640 exactly (96x160 ... 12x20):
# with 7x7, stride 16 and 32 were 22 % padding tokens. 102.5 against 105.6 ms in ONNX Runtime (2 threads, batch 1,
# each graph in its own processes, 2026-12-05; README, benchmarks).
# nuScenes 1600x900 and BDD100K 1280x720 frames scale to 640x360; the 24 rows below are black padding.
#   python tools/train.py configs/swin_deploy_nuscenes_bdd100k.py \
#       --cfg-options data_root=/data/nuscenes bdd100k.data_root=/data/bdd100k
#   python tools/export_onnx.py configs/swin_deploy_nuscenes_bdd100k.py CKPT --out swin_deploy.onnx --batch 6
_base_ = ["_base_/model_swin_t.py", "_base_/data_nuscenes.py", "_base_/schedule_24e.py"]

bdd100k = dict(data_root="data/bdd100k", train_split="train", val_split="val", sample_fraction=0.4)
input_size = [384, 640]
model = dict(
    backbone=dict(embed_dim=64, depths=[1, 1, 3, 1], num_heads=[2, 4, 8, 16], window_size=[6, 10], drop_path_rate=0.1),
    neck=dict(channels=48),
    heads=dict(
        drivable=dict(channels=32, num_classes=2),
        obstacles=dict(dim=96, num_queries=100, num_layers=3, num_heads=4, ffn_dim=384, levels=[1, 2, 3],
                       cross_attention="deformable"),
        lanes=dict(dim=96, num_queries=30, num_layers=3, num_heads=4, ffn_dim=384, num_points=36, levels=[1, 2, 3]),
        lights=dict(_delete_=True, dim=96, num_queries=50, num_layers=3, num_heads=4, ffn_dim=384, levels=[1, 2, 3],
                    cross_attention="deformable"),
    ),
)
