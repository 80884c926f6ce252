#!/usr/bin/env python
"""Convergence study: training recipes scored on held-out scenes at a fixed step budget.

Each variant trains the demo config (`configs/demo_synthetic.py` unless --config) with its own
overrides through `tools/train.py` (real Lightning, the demo's data), scores the validation
scenes, never trained on, every --eval-every steps with `tools/test.py`'s metrics, and writes
<out>/<variant>/curves.png (training loss and held-out metrics against the step). A table of
the final scores goes to stdout and <out>/table.md; negative results stay in it.

    python bench/convergence.py                                # every variant, 900 steps each
    python bench/convergence.py --variants demo no_dense --steps 300
    python bench/convergence.py --config CFG --cfg-options data_root=... --steps 2   # smoke run

Wall time is the training process's (held-out scoring included), on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

# name: (what it tests, --cfg-options). "demo" is the shipped recipe; the other variants take one
# ingredient out, add one that did not pay (conv_tower), or take all out (old_recipe). The variants
# that the README's study lists on run 13 ran before own_necks shipped (run 14): put "shared_neck"'s
# override beside theirs to reproduce them (their own model.own_necks, where they set one, replaces
# the demo's list; trunk_gradient_norm and clip_per_part came with run 15). The variants listed on run 15 and
# before ran with the lane head's trunk weight at 1, which run 16 set to 2: put RUN_15's override beside theirs.
# Runs 13 and 14 clipped the trunk together with the light head; run 15 clips every part on its own.
# The variants listed on run 16 and before trained at 224x448 with Swin windows of 7 for 900 steps, which run 17 set
# to 192x384, windows of 6, 1100 steps: put RUN_16's override beside theirs (the "run16" variant is run 16 itself).
RUN_15 = {"model.trunk_gradient_scale.lanes": 1.0}
RUN_16 = {"input_size": [224, 448], "model.backbone.window_size": 7, "trainer.max_steps": 900,
          "heldout_eval_every_n_steps": 300}
TRUNK_WITH_LIGHT_CLIP = {"optimizer.clip_per_part": ["obstacles", "lanes", "drivable"]}
TOWER = {f"model.heads.{head}.memory_convs": 2 for head in ("obstacles", "lanes", "lights")}
NO_SAMPLING = {f"model.heads.{head}.reference_sampling": False for head in ("obstacles", "lanes", "lights")}
VARIANTS = {
    "demo": ("shipped: dense one-to-many token loss, one class positive per object, hidden targets dropped, "
             "queries read the image at their reference, lanes proposed through the token, lane-marking mask, "
             "3D from the query's box, one-to-many obstacle, light and lane class targets + NMS, deformable "
             "cross-attention in the box heads, training images at one scale, a feature pyramid per query "
             "head, each head's trunk gradient at norm 1 (the lane head's weighted 2) with the trunk clipped on "
             "its own", {}),
    "shared_neck": ("run 13: every head reads the one shared feature pyramid (model.own_necks=[]), the recipe "
                    "before own_necks shipped", {"model.own_necks": [], "model.trunk_gradient_norm": None,
                                                 **TRUNK_WITH_LIGHT_CLIP, **RUN_15}),
    "run_14": ("run 14: own_necks without trunk_gradient_norm, the trunk clipped with the light head",
               {"model.trunk_gradient_norm": None, **TRUNK_WITH_LIGHT_CLIP, **RUN_15}),
    "run_15": ("run 15: every head's normalised trunk gradient weighted alike (the lane head's at 1, not 2)", RUN_15),
    "adam_beta2_0.99": ("AdamW's second-moment decay at 0.99 instead of the library's 0.999: at 0.999 the "
                        "squared-gradient average spans about 1000 steps, the whole 900-step run",
                        {"optimizer.betas": [0.9, 0.99]}),
    "adam_beta2_0.99_lanes_0.999": ("adam_beta2_0.99 for the trunk and every head but the lane head, which keeps "
                                    "0.999 (optimizer.head_betas): at 0.99 the obstacles gained and the lanes lost",
                                    {"optimizer.betas": [0.9, 0.99], "optimizer.head_betas.lanes": [0.9, 0.999]}),
    "obstacles_beta2_0.99": ("only the obstacle head's weights at AdamW beta2 0.99 (optimizer.head_betas), the trunk "
                             "and the other heads at 0.999: does the obstacle gain of adam_beta2_0.99 live in the "
                             "head, away from the trunk the lanes share?",
                             {"optimizer.head_betas.obstacles": [0.9, 0.99]}),
    "lane_layers_3": ("a third decoder layer in the lane head (model.heads.lanes.num_layers=3): curved lanes, 42 % "
                      "of the held-out ones, are found at 12 % against 48 % of straight ones (bench/lane_error.py), "
                      "and each layer refines the lane's polynomial once more",
                      {"model.heads.lanes.num_layers": 3}),
    "lane_perspective": ("the lane head's proposals and refinements with a perspective term c / (y - h) beside the "
                         "cubic (model.heads.lanes.horizon_row=0.4375: the demo's horizon, input row 98 of 224): "
                         "a lane curving on flat ground sweeps sideways near the horizon as no cubic does",
                         {"model.heads.lanes.horizon_row": 0.4375}),
    "adam_beta2_0.99_lane_trunk_2": ("adam_beta2_0.99 with the lane head's gradient into the shared trunk doubled "
                                     "(model.trunk_gradient_scale.lanes=2): at 0.99 the obstacles gained and the "
                                     "lanes lost through the trunk; a larger lane share of the trunk may buy it back",
                                     {"optimizer.betas": [0.9, 0.99], "model.trunk_gradient_scale.lanes": 2.0}),
    "no_reference_sampling": ("queries find their pixels by cross-attention alone (no ReferenceSampler)",
                              NO_SAMPLING),
    "all_class_positives": ("every assigned token a class positive (duplicate queries of one object)",
                            {"matcher.dense_class_positives": "all"}),
    "no_dense": ("without the dense token loss (query selection learns from its own top-k only)",
                 {"matcher.dense_weight": 0.0}),
    "no_visibility_filter": ("hidden obstacles kept as targets (min_obstacle_visibility=0)",
                             {"min_obstacle_visibility": 0.0}),
    "conv_tower": ("plus two residual 3x3 conv blocks on every head's memory tokens", TOWER),
    "lanes_stride4": ("the lane head's memory and reference sampling include the stride-4 level",
                      {"model.heads.lanes.levels": [0, 1, 2]}),
    "geometric_depth": ("lanes at stride 4 and obstacle depth as a residual on fx * H / h",
                        {"model.heads.lanes.levels": [0, 1, 2], "model.heads.obstacles.geometric_depth": True}),
    "no_lane_mask": ("without the auxiliary lane-marking mask on the lane head's finest level",
                     {"loss_weights.lane_mask": 0.0}),
    "lane_mask_0.3": ("the lane-marking mask at weight 0.3 instead of 1.0", {"loss_weights.lane_mask": 0.3}),
    "iou_aware": ("box heads' class target = the matched box's IoU (varifocal loss, RT-DETR)",
                  {"matcher.iou_aware_classification": True}),
    "batch4_1800": ("half the batch (4), twice the steps (1800): the same images seen, twice the updates",
                    {"batch_size": 4, "trainer.max_steps": 1800, "heldout_eval_every_n_steps": 600}),
    "velocity_0.05": ("the obstacle velocity loss at weight 0.05 (FCOS3D's code weight): one image cannot show "
                      "speed, and the irreducible L1 term was the largest obstacle loss, shared by the 3D MLP",
                      {"loss_weights.obstacle_velocity": 0.05}),
    "lane_marking": ("the lane head's final points snap to a stride-4 lane-marking map (a small CNN, also the "
                     "auxiliary mask) by a per-row soft arg-max within 4 cells",
                     {"model.heads.lanes.marking_refinement": True}),
    "lane_marking_row": ("the lane_marking snap over the whole row under a Gaussian prior around the query's x "
                         "(learned width, 4 cells to start) instead of a hard window",
                         {"model.heads.lanes.marking_refinement": True, "model.heads.lanes.marking_search": "row"}),
    "lane_marking_subcell": ("lane_marking_row + a sub-cell offset per marking-map cell (tanh, +-1 cell) and a "
                             "learned sharpness of the map's logits in the row's soft arg-max",
                             {"model.heads.lanes.marking_refinement": True, "model.heads.lanes.marking_search": "row",
                              "model.heads.lanes.marking_offsets": True}),
    "lane_row_kernel": ("lane_marking_row + row-wise classification: each final query's own 1x1 kernel on the "
                        "marking map's features scores every cell of each row (CondLaneNet), trained by a per-row "
                        "cross-entropy on the labelled cell (UFLD); x = the distribution's expectation",
                        {"model.heads.lanes.marking_refinement": True, "model.heads.lanes.marking_search": "kernel"}),
    "denoising": ("denoising queries in the box heads (DN-DETR): up to 100 (obstacles) / 60 (lights) noised "
                  "copies of the ground-truth boxes per image (corners moved by up to 0.4 x half the box, 20 % of "
                  "labels flipped) join the decoder, masked from the selected queries, and learn without matching",
                  {"model.heads.obstacles.denoising_queries": 100, "model.heads.lights.denoising_queries": 60}),
    "lane_gap_fit": ("lane_marking_row + the gap fit: the corrections the row search finds on painted rows, fitted "
                     "as offset + slope over the rows (least squares weighted by each row's evidence), also move "
                     "the rows in a dashed marking's gaps (model.heads.lanes.gap_fit)",
                     {"model.heads.lanes.marking_refinement": True, "model.heads.lanes.marking_search": "row",
                      "model.heads.lanes.gap_fit": True}),
    "yaw_bins": ("the obstacle heading as MultiBin classification over 4 bins + a (sin, cos) residual per bin "
                 "(Deep3DBox; model.heads.obstacles.yaw_bins=4) instead of one (sin, cos) regression, which an "
                 "image that hides front from back pulls to the mean", {"model.heads.obstacles.yaw_bins": 4}),
    "yaw_bins_light": ("yaw_bins with the heading loss at weight 0.2 (loss_weights.obstacle_yaw): the bins' "
                       "cross-entropy cost half the mAP at weight 1",
                       {"model.heads.obstacles.yaw_bins": 4, "loss_weights.obstacle_yaw": 0.2}),
    "ema": ("evaluate a moving average of the weights (optimizer.ema_decay=0.999, ramped by (1 + t) / (10 + t): "
            "about the last tenth of the steps; RT-DETR, DINO keep one)", {"optimizer.ema_decay": 0.999}),
    "lane_line_iou": ("CLRNet's line IoU loss on the lane points at weight 2 (CLRNet's CULane weight) beside the "
                      "L1: per visible row the predicted and true x widened to +-15/800 of the width, IoU summed "
                      "over the rows", {"loss_weights.lane_line_iou": 2.0}),
    "one_to_one": ("obstacles trained one-to-one (only the Hungarian match is a class positive) and decoded "
                   "NMS-free: the demo recipe before one-to-many class targets",
                   {"matcher.obstacle_one_to_many_iou": None, "postprocess.obstacle_nms_iou": None}),
    "deformable": ("all three query heads use multi-scale deformable cross-attention (4 learned points per head "
                   "and level around the query's box) instead of dense attention to every memory token",
                   {"model.heads.obstacles.cross_attention": "deformable",
                    "model.heads.lanes.cross_attention": "deformable",
                    "model.heads.lights.cross_attention": "deformable"}),
    "deformable_obstacles": ("only the obstacle head uses deformable cross-attention; lanes and lights stay dense",
                             {"model.heads.obstacles.cross_attention": "deformable",
                              "model.heads.lanes.cross_attention": "dense",
                              "model.heads.lights.cross_attention": "dense"}),
    "light_one_to_one": ("the light head trained one-to-one and decoded NMS-free: the demo recipe before one-to-many "
                         "light class targets (run 5)",
                         {"matcher.light_one_to_many_iou": None, "postprocess.light_nms_iou": None}),
    "lane_one_to_one": ("the lane head trained one-to-one and decoded NMS-free: the demo recipe before one-to-many "
                        "lane class targets (run 11)",
                        {"matcher.lane_one_to_many_iou": None, "postprocess.lane_nms_iou": None}),
    "no_lane_kernels": ("the lane head without the marking map and its row kernels: the demo recipe before run 7 "
                        "(run 6)", {"model.heads.lanes.marking_refinement": False,
                                    "model.heads.lanes.marking_search": "window"}),
    "dense_attention": ("every query head attends densely to all memory tokens: the demo recipe before "
                        "deformable cross-attention (run 4)",
                        {"model.heads.obstacles.cross_attention": "dense",
                         "model.heads.lanes.cross_attention": "dense",
                         "model.heads.lights.cross_attention": "dense"}),
    "obstacles_stride4": ("the obstacle head's memory, query selection and deformable sampling also on the stride-4 "
                          "level (levels 0-3), as the light head: a traffic cone 30 m away is about one stride-8 cell",
                          {"model.heads.obstacles.levels": [0, 1, 2, 3]}),
    "depth_uncertainty": ("the obstacle depth with a Laplace scale (MonoDLE / GUPNet): the depth loss is the Laplace "
                          "negative log-likelihood; scored ranking by class score x P(depth within 1 m)",
                          {"model.heads.obstacles.depth_uncertainty": True,
                           "postprocess.obstacle_depth_confidence": True}),
    "min_visibility_0.4": ("obstacle targets the camera sees less than 40 % of dropped (the default drops < 20 %)",
                           {"min_obstacle_visibility": 0.4}),
    # Diagnostics of what the query heads lose by sharing the trunk and the step budget with each other:
    "lanes_only": ("the lane and drivable heads alone (the box heads off): what the lane head learns with the "
                   "whole trunk and every step to itself", {"model.heads.obstacles": None, "model.heads.lights": None}),
    "obstacles_only": ("the obstacle and drivable heads alone (the lane and light heads off): what the obstacle head "
                       "learns with the whole trunk and every step to itself",
                       {"model.heads.lanes": None, "model.heads.lights": None}),
    "light_trunk_gradient_0.1": ("the light head's gradient into the shared backbone and FPN scaled by 0.1 "
                                 "(model.trunk_gradient_scale): it was 5-10x each other head's there",
                                 {"model.trunk_gradient_scale.lights": 0.1}),
    "lane_own_neck": ("the lane head reads a feature pyramid of its own on the backbone's features "
                      "(model.own_necks=[\"lanes\"]): the box heads no longer share its 32-channel FPN; alone "
                      "(lanes_only) the lane head found twice the curved lanes", {"model.own_necks": ["lanes"]}),
    "own_necks": ("each query head (obstacles, lanes, lights) reads a feature pyramid of its own; the shared one "
                  "serves the drivable head: lane_own_neck lifted the lanes and the lights fell, so does every "
                  "query head gain from a neck of its own?",
                  {"model.own_necks": ["obstacles", "lanes", "lights"]}),
    "lane_own_neck_beta2_0.99": ("lane_own_neck with AdamW's beta2 at 0.99 (adam_beta2_0.99 lifted the obstacles "
                                 "and cost the lanes through the shared trunk; with a neck of their own the lanes "
                                 "may keep their gain)",
                                 {"model.own_necks": ["lanes"], "optimizer.betas": [0.9, 0.99]}),
    "lane_own_neck_clip_per_part": ("lane_own_neck with the trunk's gradient clipped on its own, not together with "
                                    "the light head (optimizer.clip_per_part=true): the light head's gradient norm "
                                    "(45-560 on run 13's batches) set the trunk's clip factor, 0.002-0.019 per step",
                                    {"model.own_necks": ["lanes"], "optimizer.clip_per_part": True}),
    "trunk_gradient_norm": ("run 14 with each head's gradient into the trunk rescaled to norm 1 at every step "
                            "(model.trunk_gradient_norm) and the trunk clipped on its own (optimizer.clip_per_part): "
                            "on run 13 the lanes reached 0.455 only with both couplings undone (the box heads' "
                            "gradients out of the trunk and its clip apart from the light head's); here no head is "
                            "taken out, none sets the trunk's direction or the size of its step",
                            {"model.trunk_gradient_norm": 1.0, "optimizer.clip_per_part": True, **RUN_15}),
    "trunk_gradient_norm_light_clip": ("run 15 with the trunk clipped together with the light head again (run 14's "
                                       "optimizer.clip_per_part list), the norm kept: which of the two made run 15",
                                       {**TRUNK_WITH_LIGHT_CLIP, **RUN_15}),
    "norm_lanes_2": ("run 16 (shipped): run 15 with the lane head's normalised gradient into the trunk weighted 2 "
                     "against the other heads' 1 (model.trunk_gradient_scale.lanes=2 with the norm: the lanes' share "
                     "of the trunk's gradient from 1/4 to 2/5): the lanes reached 0.455-0.505 when the trunk learned "
                     "for them alone", {"model.trunk_gradient_scale.lanes": 2.0}),
    "norm_lanes_3": ("norm_lanes_2 with the lane head's weight at 3 (its share of the trunk's gradient 1/2): at 2 the "
                     "lanes gained on every seed measured", {"model.trunk_gradient_scale.lanes": 3.0}),
    "norm_obstacles_lanes_2": ("run 15 with the obstacle and lane heads' normalised gradients into the trunk weighted "
                               "2 against the light and drivable heads' 1: the trunk's share for the two heads under "
                               "their targets, taken from the two above theirs",
                               {"model.trunk_gradient_scale.lanes": 2.0,
                                "model.trunk_gradient_scale.obstacles": 2.0}),
    "lane_rows_below_horizon": ("run 16 with the lane head's 24 anchor rows spread over the input below 0.42 of its "
                                "height instead of over all of it (model.heads.lanes.row_top=0.42; UFLD's CULane rows "
                                "start at 0.42 too): the demo's horizon is at 0.4375, so 11 of the 24 rows never cross "
                                "a lane; encoded and decoded, the held-out lanes keep a mean IoU of 0.90 instead of "
                                "0.84 with their own labels, and the rows land at 5.3 input px apart instead of 9.3",
                                {"model.heads.lanes.row_top": 0.42}),
    "lane_rows_below_horizon_share_1": (
        "lane_rows_below_horizon with the lane head's normalised trunk gradient back at weight 1 (run 15's equal "
        "shares): with their rows on the road the lanes led run 16 at 600 steps on every seed, so they may need less "
        "of the trunk, and the light and obstacle heads lost with the lanes at weight 2",
        {"model.heads.lanes.row_top": 0.42, **RUN_15}),
    "ground_depth": ("run 16 with each obstacle query also placing the row of its box's bottom centre "
                     "(model.heads.obstacles.ground_keypoint) and the decoder meeting the ground plane with it, fused "
                     "with the regressed depth by inverse variance (postprocess.obstacle_ground_depth): on run 16's "
                     "held-out detections the projected centre's row was off by a median 1.0-1.2 px at 10-30 m while "
                     "the regressed depth was off by 6-8 %; a row that precise on the ground gives 2-4 %",
                     {"model.heads.obstacles.ground_keypoint": True, "postprocess.obstacle_ground_depth": True}),
    "norm_lr_1.5e-3": ("run 16 at a learning rate of 1.5e-3 instead of 1e-3: at 2e-3 the obstacle head once collapsed "
                       "to input-independent outputs, with the loss's size setting each head's push on the trunk; "
                       "with the trunk's gradients normalised per head and clipped apart, a larger step may be safe, "
                       "and at 900 steps the recipe is still far from converged (mAP 0.22 at 2700)",
                       {"optimizer.lr": 1.5e-3}),
    "shared_light_neck": ("run 14 with the light head back on the shared feature pyramid beside the drivable head "
                          "(model.own_necks=[obstacles, lanes]): with a neck of its own it lost light AP50 on every "
                          "seed (0.643 against 0.739 on the mean), with the lanes' alone 0.04",
                          {"model.own_necks": ["obstacles", "lanes"]}),
    "own_necks_beta2_0.99": ("own_necks with AdamW's beta2 at 0.99: each lifted the obstacles on its own "
                             "(adam_beta2_0.99 on two seeds of three, own_necks on three), and with necks of their "
                             "own the lanes may keep what 0.99 cost them through the shared FPN",
                             {"model.own_necks": ["obstacles", "lanes", "lights"], "optimizer.betas": [0.9, 0.99]}),
    "box_heads_off_trunk_clip_per_part": (
        "box_heads_off_trunk with the trunk clipped on its own (optimizer.clip_per_part=true), a diagnostic: "
        "box_heads_off_trunk still clipped the trunk together with the light head, whose spikes set the trunk's "
        "clip factor; with both, the trunk is trained and clipped as in lanes_only (lane F1 0.505). On run 13 "
        "(one shared neck), where those two ran",
        {"model.trunk_gradient_scale.lights": 0.0, "model.trunk_gradient_scale.obstacles": 0.0,
         "optimizer.clip_per_part": True, "model.own_necks": []}),
    "box_heads_off_trunk": ("the box heads train their own weights only (trunk gradient scale 0): the trunk learns "
                            "from the lane and drivable heads alone",
                            {"model.trunk_gradient_scale.lights": 0.0, "model.trunk_gradient_scale.obstacles": 0.0}),
    "clip_per_part": ("the gradient norm clipped per part (trunk, each head: optimizer.clip_per_part) instead of as a "
                      "whole, where the light head's spikes set the scale of every step",
                      {"optimizer.clip_per_part": True}),
    "clip_per_part_lights_with_trunk": ("clip_per_part for the obstacle, lane and drivable heads; the light head is "
                                        "clipped together with the trunk as before (clip_per_part cost light AP50 "
                                        "at seeds 0 and 2)",
                                        TRUNK_WITH_LIGHT_CLIP),
    "bf16_mixed": ("the shipped recipe under bf16 autocast (trainer.precision=bf16-mixed): matmuls 4.6x faster on a "
                   "CPU with AVX512-BF16, the training step 11 % faster on the 2-core demo machine",
                   {"trainer.precision": "bf16-mixed"}),
    "lane_trunk_gradient_3": ("the lane head's gradient into the shared backbone and FPN scaled by 3 "
                              "(model.trunk_gradient_scale): there it was 3-6 against the light head's 24-47 and the "
                              "obstacle head's 11-24, and the lane head alone (lanes_only) reaches twice the lane F1",
                              {"model.trunk_gradient_scale.lanes": 3.0}),
    "box_lane_trunk_gradient_2": (
        "the obstacle and lane heads' gradients into the shared trunk scaled by 2: a larger share of the trunk for "
        "the two heads under their targets, taken from the light head, which passes its own (lane_trunk_gradient_3 "
        "lifted lanes and cost lights and mAP)",
        {"model.trunk_gradient_scale.lanes": 2.0, "model.trunk_gradient_scale.obstacles": 2.0}),
    "conv_stem": ("Swin's 4x4 patchify stem replaced by two stride-2 3x3 convolutions (model.backbone.stem=conv; "
                  "Xiao et al. 2021): every stride-4 token reads a 7x7-pixel neighbourhood, non-linearly",
                  {"model.backbone.stem": "conv"}),
    "obstacle_one_to_many_regression": (
        "the obstacle queries that are one-to-many class positives (2D IoU >= 0.6) also regress the object they "
        "overlap (2D box, depth, size, heading, velocity), averaged over them, at weight 1 beside the one-to-one "
        "losses (H-DETR's one-to-many branch on the same queries)", {"matcher.obstacle_one_to_many_regression": 1.0}),
    "lane_one_to_many_regression": (
        "the lane queries that are one-to-many class positives (the F1's IoU >= 0.5 at the row anchors) also regress "
        "the lane they overlap (points, visibility, row classification), averaged over them, at weight 1",
        {"matcher.lane_one_to_many_regression": 1.0}),
    "dense_depth": ("every memory token of the obstacle head also regresses its object's depth code, trained by the "
                    "dense loss on the box ATSS positives (model.heads.obstacles.dense_depth; FCOS3D / MonoDETR's "
                    "foreground depth): a depth signal for the shared tokens the queries start from",
                    {"model.heads.obstacles.dense_depth": True}),
    "hue_0": ("the training colour jitter without its hue shift (augment.hue=0; brightness, contrast and saturation "
              "still jitter): the synthetic classes differ by colour, and +-11 degrees of hue moves a motorcycle's red "
              "onto a pedestrian's pink (20 degrees apart)", {"augment.hue": 0.0}),
    "backbone_1141": ("four Swin blocks at stride 16 instead of two (model.backbone.depths=[1,1,4,1]; Swin-T has six "
                      "there): the backbone's capacity was never varied, and stride-16 blocks are cheap at 224x448 "
                      "(392 tokens; one more block cost +2 % per step on random targets)",
                      {"model.backbone.depths": [1, 1, 4, 1]}),
    "neck_64": ("a 64-channel FPN instead of 32 (model.neck.channels=64): every head reads its memory from the neck, "
                "and 32 channels carry class, box and depth for three query heads (+10 % per step on random targets)",
                {"model.neck.channels": 64}),
    "scale_jitter": ("training images zoomed by [0.9, 1.15] as the base config does (the demo until run 13; "
                     "augment.scale_range=[1,1] since): the rig's focal lengths never change, and at 900 steps the "
                     "zoom spread the data over scales no held-out image has", {"augment.scale_range": [0.9, 1.15]}),
    "no_colour_jitter": ("the demo without the colour jitter (augment.photometric=False): the synthetic renderer's "
                         "lighting and colours never vary, so at this budget the jitter might only blur the colour "
                         "and face-shade cues the classes and headings are read from",
                         {"augment.photometric": False}),
    "no_flip": ("the demo without horizontal flips (augment.flip_prob=0): the synthetic world drives on the right, "
                "and a mirrored image shows traffic on the left that no held-out scene has",
                {"augment.flip_prob": 0.0}),
    "linear_decay": ("the learning rate falls on a straight line to zero after the warmup instead of a cosine to 0.02 "
                     "(scheduler.decay=linear, min_lr_ratio=0; Bergsma et al. 2025, \"Straight to Zero\"): the same "
                     "area under the schedule, less of it early and more in the second half",
                     {"scheduler.decay": "linear", "scheduler.min_lr_ratio": 0.0}),
    "drivable_stride8": ("the drivable head merges and classifies the FPN levels at stride 8, its logits upsampled to "
                         "stride 4 (model.heads.drivable.merge_stride=8): the shared neck, read by that head alone, "
                         "then computes no stride-4 level; 2.19 instead of 2.52 GFLOPs per image, a 0.94x training "
                         "step on random targets. Does the drivable area keep its target, and what do the others do "
                         "with the time?", {"model.heads.drivable.merge_stride": 8}),
    "input_192x384_1200": ("a 192x384 input (0.73x the pixels; 640x360 frames scaled to 384x216, the bottom 192 rows "
                           "kept: the same field of view) with Swin windows of 6 so every stage tiles, for 1200 steps "
                           "(the study's batch4_1800 says the budget is held by compute: fewer pixels buy more images)",
                           {"input_size": [192, 384], "model.backbone.window_size": 6, "trainer.max_steps": 1200,
                            "heldout_eval_every_n_steps": 600}),
    "input_192x384_1100": ("input_192x384_1200 for 1100 steps, about the training time of run 16's 900 steps at "
                           "224x448 (shipped as run 17: the demo's config now)",
                           {"input_size": [192, 384], "model.backbone.window_size": 6, "trainer.max_steps": 1100,
                            "heldout_eval_every_n_steps": 550}),
    "input_160x320_1400": ("a 160x320 input (0.51x run 16's pixels; 640x360 frames scaled to 320x180, the bottom 160 "
                           "rows kept: the same field of view) with Swin windows of 5 so every stage tiles, for 1400 "
                           "steps (a 0.50x training step on random targets: 605 against 1219 ms)",
                           {"input_size": [160, 320], "model.backbone.window_size": 5, "trainer.max_steps": 1400,
                            "heldout_eval_every_n_steps": 700}),
    "lane_query_point_loss": ("run 17 with an L1 on the lane head's final decoder points before the marking search "
                              "(model.heads.lanes.query_point_loss): without it that layer refined nothing (its best "
                              "query as far off as after the first layer), and the search keeps the decoder's x on "
                              "the rows it finds no paint on, most of a curved lane's far third",
                              {"model.heads.lanes.query_point_loss": True}),
    "lane_marking_context": ("run 17 with three residual dilated 3x3 blocks (dilations 2, 4, 8 cells) after the lane "
                             "marking map's two plain convs (model.heads.lanes.marking_context_dilations=[2,4,8]; "
                             "+0.25 GFLOPs per image, 1.86 -> 2.11): the map is trained on the labelled lanes, "
                             "which run through the dashes' gaps and behind vehicles, and its 5-cell view sees little "
                             "of a curved lane's far third, 81 % of it unpainted or hidden",
                             {"model.heads.lanes.marking_context_dilations": [2, 4, 8]}),
    "lane_marking_context_16": ("run 18 with a fourth context block of dilation 16 cells in the lane marking map "
                                "(model.heads.lanes.marking_context_dilations=[2,4,8,16]; +0.085 GFLOPs per image): "
                                "run 18's three blocks lifted the lanes by widening the map's view from 2 to 16 cells "
                                "either side; does a view of 32 cells (a third of the map's width) lift them further? "
                                "(shipped as run 19: the demo's config now)",
                                {"model.heads.lanes.marking_context_dilations": [2, 4, 8, 16]}),
    "lane_quality_targets": ("run 19 with IoU-aware lane class targets (matcher.lane_quality_targets='all'): each "
                             "decoder class positive targets its lane's overlap with the labelled one (the F1's IoU "
                             "at the rows) instead of 1, a quality focal loss. Why: on run 19's held-out lanes "
                             "perfect scores would give F1 0.76 against the 0.58 shipped at seed 1 "
                             "(bench/lane_error.py): the scores rank lanes that fit barely better than lanes that "
                             "nearly fit",
                             {"matcher.lane_quality_targets": "all"}),
    "lane_quality_one_to_many": ("run 19 with IoU-aware class targets for the one-to-many lane positives only "
                                 "(matcher.lane_quality_targets='one_to_many'): the Hungarian matches keep target 1, "
                                 "the other queries on a lane target their overlap with it (0.5-1). Why: with every "
                                 "positive soft (lane_quality_targets) the matched queries, whose overlap is near 0 "
                                 "early on, lost their class signal and the head found fewer lanes at any threshold",
                                 {"matcher.lane_quality_targets": "one_to_many"}),
    "run16": ("run 16, the demo until run 17: a 224x448 input (640x360 -> 448x252, the bottom 224 rows), Swin "
              "windows of 7, 900 steps", RUN_16),
    "old_recipe": ("before the study: no dense loss, hidden targets kept",
                   {"matcher.dense_weight": 0.0, "min_obstacle_visibility": 0.0}),
}
METRICS = (("nuscenes/mAP", "mAP"), ("nuscenes/NDS", "NDS"), ("lanes/F1", "lane F1"), ("lights/AP50", "light AP50"),
           ("drivable/IoU", "drivable IoU"), ("drivable/IoU_bdd100k", "drivable IoU (BDD)"))


def exit_on_sigterm() -> None:
    """Turn SIGTERM (`kill`) into SystemExit(143), so that it unwinds run_training, which stops the training."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def run_training(command: list[str], log) -> int:
    """Run a training command (its output to ``log``) and return its exit code. Stopping this bench (SIGTERM, see
    ``exit_on_sigterm``, or Ctrl-C) stops the training and its data workers with it: a run left behind keeps
    training into the variant's work dir beside the next run of it, and halves the CPU of both."""
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        return child.wait()
    finally:
        if child.poll() is None:  # stopped from outside: the training's whole process group goes too
            os.killpg(child.pid, signal.SIGTERM)
            child.wait()


def run_variant(name: str, options: dict, args, config_steps: int) -> dict:
    from perception.training.curves import read_curves

    work_dir = os.path.join(args.out, name)
    # --steps and --eval-every replace the config's budget and scoring interval; a variant's own replace both.
    overrides = {"trainer.enable_progress_bar": False, **({"trainer.max_steps": args.steps} if args.steps else {}),
                 **dict(args.cfg_options), **options}
    steps = overrides.get("trainer.max_steps", config_steps)
    if args.eval_every is not None or args.steps:  # scored every N steps and always at the end (0: at the end only)
        overrides.setdefault("heldout_eval_every_n_steps", args.eval_every or steps)
    command = [sys.executable, os.path.join(ROOT, "tools", "train.py"), args.config, "--work-dir", work_dir,
               "--cfg-options", *[f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}"
                                  for k, v in overrides.items()]]
    start = time.time()
    log_path = os.path.join(args.out, f"{name}.log")
    os.makedirs(args.out, exist_ok=True)
    with open(log_path, "w") as log:
        code = run_training(command, log)
    wall = time.time() - start
    if code != 0:
        raise SystemExit(f"variant {name} failed (exit {code}); see {log_path}")
    curves = read_curves(os.path.join(work_dir, "csv", "metrics.csv"))
    final = {key: curves[f"heldout/{key}"][-1][1] for key, _ in METRICS if f"heldout/{key}" in curves}
    return {"name": name, "steps": steps, "wall_s": round(wall, 1), "metrics": final,
            "curves": os.path.join(work_dir, "curves.png")}


def table(rows: list[dict]) -> str:
    header = "| variant | what changes | steps | wall | " + " | ".join(label for _, label in METRICS) + " |"
    lines = [header, "|" + "---|" * (4 + len(METRICS))]
    for row in rows:
        scores = " | ".join(f"{row['metrics'][k]:.3f}" if k in row["metrics"] else "-" for k, _ in METRICS)
        lines.append(f"| {row['name']} | {VARIANTS[row['name']][0]} | {row['steps']} | "
                     f"{row['wall_s'] / 60:.1f} min | {scores} |")
    return "\n".join(lines)


def main() -> int:
    from mmengine.config import Config, DictAction

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "demo_synthetic.py"))
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps per variant (default: the config's trainer.max_steps, the demo's budget)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="held-out scoring interval in steps, 0: at the end only (default: the config's "
                             "heldout_eval_every_n_steps, or the end when --steps is given)")
    parser.add_argument("--out", default=os.path.join(ROOT, "work_dirs", "convergence"))
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={},
                        help="overrides for every variant (e.g. data_root=... for a smoke run)")
    args = parser.parse_args()
    exit_on_sigterm()
    config_steps = Config.fromfile(args.config).trainer["max_steps"]
    rows = []
    for name in args.variants:
        print(f"{name}: {VARIANTS[name][0]}", flush=True)
        rows.append(run_variant(name, VARIANTS[name][1], args, config_steps))
        print("  " + ", ".join(f"{label} {rows[-1]['metrics'].get(k, float('nan')):.3f}" for k, label in METRICS)
              + f"  ({rows[-1]['wall_s'] / 60:.1f} min; curves {rows[-1]['curves']})", flush=True)
    text = table(rows)
    print(text)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
