# CPU demo: all four perception tasks with a tiny Swin (same architecture, fewer channels and
# blocks) on synthetic data written by the project in the real formats: nuScenes
# (tools/make_synthetic_nuscenes.py: drivable area, 3D obstacles, map-derived lanes) mixed with
# BDD100K (tools/make_synthetic_bdd100k.py: traffic lights with colour, lanes, drivable area).
# Each task learns only from the images that carry its labels. About 18-25 minutes on 2 cores.
#
# The query heads learn from the image (dense one-to-many token loss, matcher.dense_weight; hidden
# obstacles dropped from the targets, min_obstacle_visibility) and score on the held-out scenes,
# but far below what a GPU schedule gives: see the README's convergence study
# (bench/convergence.py). Keep the LR at 1e-3 or below with gradient_clip_val=1.0 when the
# obstacle head is on (at 2e-3 it collapsed to input-independent outputs on varied data).
_base_ = ["_base_/model_swin_t.py", "_base_/data_nuscenes.py", "_base_/schedule_24e.py"]

data_root = "data/synthetic_nuscenes"
version = "v1.0-trainval"
train_split = "synthetic_train"
val_split = "synthetic_val"
bdd100k = dict(data_root="data/synthetic_bdd100k", train_split="train", val_split="val", sample_fraction=0.4)
# Run 17: 640x360 -> 384x216 -> keep the bottom 192 rows (the same field of view as 224x448 from 448x252), for
# 1100 steps instead of 900 in about the same training time (1.86 instead of 2.52 GFLOPs per image). The demo's
# budget is held by the images computed on (convergence study, batch4_1800), and fewer pixels buy more of them.
# Convergence study, input_192x384_1100 at seeds 0 / 1 / 2 on one AMD EPYC: held-out lane F1 0.508 / 0.492 / 0.514,
# mAP 0.156 / 0.166 / 0.158, NDS 0.226 / 0.240 / 0.234, light AP50 0.597 / 0.635 / 0.615 (run 16 on that CPU at
# seed 0: 0.390, 0.154, 0.222, 0.695; on the Intel Xeon at seed 1: 0.436, 0.155, 0.221, 0.687). At 160x320 for
# 1400 steps the lights fell below their target (input_160x320_1400: light AP50 0.495) and nothing else gained.
input_size = [192, 384]
batch_size = 8
val_batch_size = 16
num_workers = 1

# The box heads (obstacles, lights) use deformable cross-attention (convergence study, deformable: held-out
# mAP 0.101 / 0.089 vs 0.065 / 0.064 dense on two seeds); lanes stay dense (their F1 fell with it on both).
model = dict(
    # Windows of 6 tile every stage at 192x384 (48x96, 24x48, 12x24, 6x12 tokens): no padded windows.
    backbone=dict(embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], drop_path_rate=0.0, window_size=6),
    neck=dict(channels=32),
    heads=dict(
        drivable=dict(channels=32),
        obstacles=dict(dim=64, num_queries=60, num_layers=3, num_heads=4, ffn_dim=256, cross_attention="deformable"),
        # Row-wise lane classification with query kernels on the stride-4 marking map (convergence study,
        # lane_row_kernel: held-out lane F1 0.078 / 0.125 / 0.089 vs 0.047 / 0.094 / 0.053 over three seeds).
        # Run 18: three dilated residual blocks (2, 4, 8 cells) widen the marking map's view from 2 to 16 cells either
        # side, for lanes through dash gaps and behind vehicles (convergence study, lane_marking_context: with no line
        # fit, below, held-out lane F1 0.548 / 0.514 at seeds 0 / 1 against run 17's 0.508 / 0.492; on the fresh
        # seed-7 split 0.540 against 0.519, light AP50 0.648 against 0.594; demo split light AP50 0.510 / 0.619).
        # Run 19: a fourth block of dilation 16 cells (a view of 32 cells either side, a third of the map's width;
        # +0.085 GFLOPs per image). Convergence study, lane_marking_context_16, seeds 0 / 1: held-out lane F1
        # 0.591 / 0.533 against run 18's 0.548 / 0.514 at the lane threshold 0.45, 0.637 / 0.575 against 0.584 / 0.555
        # at run 19's 0.6, on the fresh seed-7 split (seed 0) 0.605 against 0.573; light AP50 0.624 / 0.608 against
        # 0.510 / 0.619, mAP 0.160 / 0.181 against 0.167 / 0.167, NDS 0.231 / 0.248 against 0.235 / 0.232.
        lanes=dict(dim=64, num_queries=20, num_layers=2, num_heads=4, ffn_dim=256, num_points=24,
                   marking_refinement=True, marking_search="kernel", marking_context_dilations=[2, 4, 8, 16]),
        lights=dict(_delete_=True, dim=64, num_queries=30, num_layers=2, num_heads=4, ffn_dim=256, levels=[0, 1, 2],
                    cross_attention="deformable"),
    ),
    # Each query head reads a 32-channel feature pyramid of its own on the backbone's features; the shared one
    # serves the drivable head (convergence study, own_necks: held-out mAP 0.136 / 0.129 / 0.143 against
    # 0.130 / 0.116 / 0.120, NDS 0.206 / 0.200 / 0.214 against 0.201 / 0.198 / 0.201, lane F1 0.393 / 0.397 / 0.365
    # against 0.346 / 0.365 / 0.377 at seeds 0 / 1 / 2; light AP50 0.704 / 0.632 / 0.593 against 0.796 / 0.739 /
    # 0.683, still above its 0.5 target). +0.6 GFLOPs per image, about 9 % more training time.
    own_necks=["obstacles", "lanes", "lights"],
    # Each head's gradient into the shared trunk rescaled to norm 1 at every step (with clip_per_part below): see there.
    trunk_gradient_norm=1.0,
    # Run 16: the lane head's normalised gradient weighted 2 against the other heads' 1 (its share of the trunk's
    # gradient 2/5 instead of 1/4; on run 13 the lanes reached 0.455-0.505 only when the trunk learned for them).
    # Convergence study, norm_lanes_2 against run 15 at seeds 0 / 1 / 2: held-out lane F1 0.444 / 0.436 / 0.451 against
    # 0.399 / 0.374 / 0.416, light AP50 0.650 / 0.687 / 0.779 against 0.667 / 0.680 / 0.632, mAP 0.185 / 0.155 / 0.151
    # against 0.173 / 0.169 / 0.149 (level on the mean, 0.164), NDS 0.246 / 0.221 / 0.220 against 0.231 / 0.229 / 0.222.
    trunk_gradient_scale=dict(lanes=2.0),
)
# Only each object's best token is a dense class positive: query selection then picks one token per
# object instead of several duplicates (convergence study: light AP50 0.35 vs 0.26, lane F1 0.08 vs 0.00).
# Obstacles: every query on an object (2D IoU >= 0.6) is a class positive, not only its Hungarian match
# (DETA), and a per-class 2D NMS at 0.3 removes the duplicates before 3D decoding (convergence study,
# one_to_many: held-out mAP 0.065 vs 0.021-0.032; the one-to-one scores ranked queries on objects
# barely above the rest, AUROC 0.61 vs 0.78).
# Lights: the same, at IoU >= 0.5 (their boxes are a few pixels: one pixel off costs more IoU), with a per-state
# 2D NMS at 0.3 (convergence study, light_one_to_many: held-out light AP50 0.773 vs 0.460 at this seed).
# Lanes: the same one-to-many class targets, every query whose lane overlaps a labelled one by the F1's IoU of 0.5
# (measured at the row anchors, perception.core.lane_overlap), with a lane NMS at 0.5 (convergence study,
# lane_one_to_many: held-out lane F1 0.293 / 0.317 vs 0.205 / 0.269 at seeds 0 / 1 on one CPU; with one-to-one
# scores the queries that fit a lane ranked barely above the rest, AUROC 0.68, and F1 with perfect scores was 0.54).
matcher = dict(dense_class_positives="one", obstacle_one_to_many_iou=0.6, light_one_to_many_iou=0.5,
               lane_one_to_many_iou=0.5)
# Until run 19 lanes were kept above 0.45, not the library's 0.3: the low-scored lanes are mostly false positives.
# Run 8 set 0.4, chosen on the 10-scene comparison split (mean held-out lane F1 of its three seeds 0.178 at 0.4, 0.167
# at 0.35, 0.150 at 0.3, 0.177 at 0.45) and confirmed on the demo's own held-out scenes (0.139 / 0.186 / 0.182 against
# 0.127 / 0.150 / 0.172 at 0.3, seeds 0 / 1 / 2; precision 0.11-0.15 at 0.3, 0.20-0.24 at 0.4). Run 13 moved it to 0.45
# the same way (seed-7 split, lane F1 of seeds 0 / 1 at 0.4 / 0.45 / 0.5: 0.340 / 0.350 / 0.359 and 0.352 / 0.366 /
# 0.361; the demo's held-out scenes at seeds 0 / 1 / 2: 0.321 / 0.353 / 0.368 at 0.4, 0.346 / 0.365 / 0.377 at 0.45).
# Until run 18 each lane's rows were put on a robust straight line (Huber scale 2.7 input px, the F1's tolerance at 448;
# kept at 384 px: on run 17's two checkpoints 0.5 / 1.4 / 2.7 px scored level on fresh held-out data, README):
# single rows that snapped to a neighbouring marking kinked otherwise straight lanes. Chosen on 10 fresh held-out
# nuScenes-format scenes + 10 drives (seed 7; lane F1 0.303 / 0.220 / 0.223 -> 0.313 / 0.237 / 0.241 on run 11's
# three checkpoints), confirmed on the demo's held-out scenes (0.237 / 0.174 / 0.197 -> 0.271 / 0.207 / 0.224).
# Run 18 drops the line fit: with the marking map's context blocks the rows of curved lanes follow the curve (far-third
# error 4.4 px against 11.8), and a straight line throws that away (lane F1 0.521 / 0.494 with, 0.548 / 0.514 without).
# Run 19 keeps lanes above 0.6: run 18's lanes score higher than they hold on unseen scenes (trained on class targets
# IoU >= 0.5 that its training images meet more often), and at 0.45 precision was 0.55 at recall 0.54. Held-out lane F1
# at 0.45 / 0.55 / 0.6 / 0.65 on run 18's checkpoints: seed 0 0.548 / 0.566 / 0.584 / 0.586, seed 1 0.514 / 0.551 /
# 0.555 / 0.569, and on the fresh seed-7 split (never trained on, but looked at in the choice) seed 0 0.540 / 0.568 /
# 0.573 / 0.567.
# Obstacles: a sample's BEV merge at 3x the class radii (car 4.5 m, pedestrian 1.5 m, cone 1.2 m): one camera's
# queries and overlapping cameras place one object twice metres apart (depth off by 6-8 %), where 2D NMS and the 1x
# radii keep both; at 1x the held-out detections held 18x as many same-class pairs at 1-3x the radius as the
# annotations do. Chosen on the fresh seed-7 split (run 19, seeds 0 / 1: mAP 0.186 / 0.207 at 1x, 0.199 / 0.215 at
# 2x, 0.203 / 0.219 at 3x, 0.200 / 0.217 at 4x), confirmed on the demo's held-out scenes (0.160 / 0.181 -> 0.167 /
# 0.190, NDS 0.231 / 0.248 -> 0.236 / 0.252; convergence study, postprocess.obstacle_merge_radius_scale=3).
postprocess = dict(obstacle_nms_iou=0.3, obstacle_merge_radius_scale=3.0, light_nms_iou=0.3, lane_score_threshold=0.6,
                   lane_line_fit_px=None, lane_nms_iou=0.5)
# Training crops keep each image's principal point on the row evaluation puts it on (convergence study,
# keep_principal_row: held-out mAP 0.122 / 0.150, NDS 0.200 / 0.217, lane F1 0.247 / 0.249 at seeds 0 / 1 against
# 0.100 / 0.098, 0.180 / 0.188, 0.130 / 0.166 with the random crop; light AP50 0.614 / 0.723 against 0.782 / 0.795).
# Training images at one scale (convergence study, no_scale_jitter, run 13: held-out lane F1 0.321 / 0.353 against
# 0.293 / 0.317 at seeds 0 / 1 on one Intel Xeon, mAP 0.130 / 0.116 against 0.120 / 0.114, light AP50 0.796 / 0.739
# against 0.587 / 0.753): the rig's cameras, like nuScenes', never change their focal length, and evaluation sees
# each at its own; at 900 steps the [0.9, 1.15] zoom only spread the data over scales no held-out image has.
# Flips stay (without them lane F1 fell to 0.256 at seed 0); the colour jitter stays (without it no clear further
# gain: lane F1 0.355 / 0.301, mAP 0.117 / 0.134).
# Real data keeps the base config's zoom (configs/_base_/data_nuscenes.py).
augment = dict(keep_principal_row=True, scale_range=[1.0, 1.0])
# The drivable losses are weighted up so they keep their share of the gradient next to three set losses.
loss_weights = dict(drivable_ce=5.0, drivable_dice=5.0)
# Run 15: each head's gradient into the trunk is rescaled to norm 1 at every step (model.trunk_gradient_norm) and the
# trunk and each head (with its own neck) are clipped each on its own: no head's loss size or spikes set the trunk's
# direction or the size of its step. Why: on run 13 the lanes reached 0.455 only with both couplings undone, the box
# heads' gradients (which set the trunk's direction) and the clip shared with the light head (whose GIoU spikes, norms
# 45-562, shrank the trunk's steps to 0.2-2 %). Convergence study, trunk_gradient_norm against run 14 at seeds
# 0 / 1 / 2: held-out mAP 0.173 / 0.169 / 0.149 against 0.136 / 0.129 / 0.143, NDS 0.231 / 0.229 / 0.222 against
# 0.206 / 0.200 / 0.214, lane F1 0.399 / 0.374 / 0.416 against 0.393 / 0.397 / 0.365, light AP50 0.667 / 0.680 / 0.632
# against 0.704 / 0.632 / 0.593, drivable IoU 0.947-0.950 against 0.923-0.937. (Before the norm, clipping the light
# head on its own cost light AP50: 0.484 / 0.506 at seeds 0 / 2 on run 7, 0.536 on run 13.)
optimizer = dict(lr=1e-3, weight_decay=0.01, backbone_lr_mult=1.0, clip_per_part=True)
scheduler = dict(warmup_steps=30, warmup_ratio=0.01, min_lr_ratio=0.02)
heldout_eval_every_n_steps = 550  # held-out learning curve: work_dirs/demo/curves.png
trainer = dict(
    max_steps=1100,
    max_epochs=-1,
    accelerator="cpu",
    devices=1,
    precision="32-true",
    gradient_clip_val=1.0,
    log_every_n_steps=10,
    check_val_every_n_epoch=None,
    val_check_interval=1100,  # once, at the end: the held-out curve is heldout_eval_every_n_steps
)
