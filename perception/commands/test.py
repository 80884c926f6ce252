"""Evaluate a checkpoint on a nuScenes-format split and write WORK_DIR/metrics.json.

    python tools/test.py configs/demo_synthetic.py work_dirs/demo/checkpoints/last.ckpt --work-dir work_dirs/demo
    python tools/test.py configs/swin_t_nuscenes.py CKPT --cfg-options data_root=/data/nuscenes --split val

Metrics are flat keys: ``nuscenes/mAP``, ``nuscenes/NDS``, ``nuscenes/mATE`` ... and per-class
``nuscenes/AP_<class>`` from the official devkit's DetectionEval on the split; ``drivable/IoU``
at the original image resolution; ``lanes/F1`` (CULane-style, also ``lanes/F1_nuscenes`` for the
map-derived lanes). With a BDD100K-format dataset in the config (``bdd100k=dict(...)``) its
validation split adds ``lights/AP50`` and ``lights/AP50_<state>`` (pycocotools),
``lanes/F1_bdd100k`` and ``drivable/IoU_bdd100k``, and BDD100K's own definitions: the lane-marking
F-score at 1 / 2 / 5 px (``lanes/F1_pix1_bdd100k`` ...) and ``drivable/mIoU_bdd100k``. The nuScenes
submission JSON is written beside them.

``--report`` also writes WORK_DIR/report/index.html (one page, images beside it): the metrics, the
devkit's detection curves, AP by distance band and class, lane and light precision/recall, the
light-state confusion matrix and the best/worst frames per task drawn with their ground truth.

Several processes (torchrun) split the images; results are gathered and de-duplicated per camera
image and rank 0 writes the JSON and metrics:

    torchrun --standalone --nproc_per_node=8 tools/test.py CONFIG CKPT --work-dir DIR

An exported camera model is evaluated with ONNX Runtime through the same pre- and post-processing
(its metrics match the PyTorch model's; tests/test_camera_export.py checks it):

    python tools/test.py configs/demo_synthetic.py --onnx work_dirs/demo/model.onnx --work-dir work_dirs/demo_onnx

Motion configs (``task = "motion"``) forecast the split's prediction-challenge agents and write
``motion/minADE_5``, ``motion/minFDE_5``, ``motion/MissRate_2_5`` (also k = 1, 10) from the devkit's
prediction metrics, beside the devkit's constant-velocity baseline as ``motion_cv/*``.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def get_args_parser() -> argparse.ArgumentParser:
    from mmengine.config import DictAction

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("checkpoint", nargs="?", help="training checkpoint (not needed with --onnx)")
    parser.add_argument("--onnx", help="evaluate this exported camera model with ONNX Runtime instead")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores)")
    parser.add_argument("--device", help="where the PyTorch model runs, e.g. cpu, cuda:1 (default: this process's GPU "
                                         "when there is one, else the CPU)")
    parser.add_argument("--work-dir", help="where metrics.json goes (default: work_dirs/<config name>)")
    parser.add_argument("--split", help="split to evaluate (default: the config's val_split)")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--format-only", action="store_true",
                        help="write the submission JSON (detection or prediction) without scoring it")
    parser.add_argument("--out", help="submission JSON path (default: WORK_DIR/results_nusc_<split>.json)")
    parser.add_argument("--report", action="store_true",
                        help="also write WORK_DIR/report/index.html: plots, AP by distance, best/worst frames drawn")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def _device(name: str):
    """--device as a torch.device; a name torch does not know, or a GPU this machine lacks, is a ConfigError."""
    import torch

    from perception.config import ConfigError

    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ConfigError(f"--device {name!r} is not a device torch knows ({error}); e.g. cpu, cuda, cuda:1") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name!r}: this machine has no CUDA device; use --device cpu")
    return device


def main(args: argparse.Namespace) -> int:
    from perception.config import ConfigError, MotionExperimentConfig, load_config, parse_config
    from perception.core.errors import PerceptionError
    from perception.data.label_cache import StaleCacheError, rebuild_command
    from perception.evaluation.evaluate import evaluate, format_table, write_metrics
    from perception.evaluation.motion import evaluate_motion

    work_dir = args.work_dir or os.path.join("work_dirs", os.path.splitext(os.path.basename(args.config))[0])
    try:
        cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
        if (args.checkpoint is None) == (args.onnx is None):
            raise ConfigError("give either a checkpoint or --onnx MODEL (exactly one)")
        if isinstance(cfg, MotionExperimentConfig):
            if args.onnx:
                raise ConfigError("--onnx evaluates camera models; evaluate the forecaster from its checkpoint")
            if args.device:
                raise ConfigError("--device places camera models; the forecaster is evaluated on the CPU")
            metrics = evaluate_motion(cfg, args.checkpoint, work_dir, split=args.split, batch_size=args.batch_size,
                                      format_only=args.format_only, results_path=args.out)
        else:
            predictor = None
            if args.onnx and args.device:
                raise ConfigError("--device places the PyTorch model; ONNX Runtime runs on the CPU here")
            if args.device:
                from perception.inference.predictors import TorchPredictor

                predictor = TorchPredictor(cfg, args.checkpoint, device=_device(args.device))
            if args.onnx:
                from dataclasses import fields

                from perception.inference.predictors import OnnxPredictor

                heads = cfg.model.heads
                enabled = tuple(f.name for f in fields(heads) if getattr(heads, f.name) is not None)
                predictor = OnnxPredictor(args.onnx, threads=args.threads, expected_input_size=tuple(cfg.input_size),
                                          expected_tasks=enabled)
            if args.report and args.format_only:
                raise ConfigError("--report needs scores: drop --format-only")
            report_dir = os.path.join(work_dir, "report") if args.report else None
            metrics = evaluate(cfg, args.checkpoint, work_dir, split=args.split, batch_size=args.batch_size,
                               format_only=args.format_only, results_path=args.out, predictor=predictor,
                               report_dir=report_dir, checkpoint_label=args.onnx or args.checkpoint)
    except (PerceptionError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        if isinstance(error, StaleCacheError):
            hint = rebuild_command(args.config, dict(args.cfg_options))
            print(f"  with this run's options: {hint}", file=sys.stderr)
        return 2
    if _rank() == 0:
        path = write_metrics(metrics, work_dir)
        print(format_table(metrics))
        print(f"metrics written to {path}")
        if getattr(args, "report", False) and "eval/report_s" in metrics:
            print(f"evaluation report: {os.path.join(work_dir, 'report', 'index.html')}")
    return 0


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _run(args: argparse.Namespace) -> int:
    """main() and a clean exit from the process group under torchrun (every rank, even on error)."""
    import torch.distributed as dist

    try:
        return main(args)
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


ENTRY_POINT = _run  # what run_command calls: main(), and the process group's clean exit under torchrun

if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
