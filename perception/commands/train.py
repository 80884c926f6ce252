"""Train a perception model from a config (Lightning; the same entry point runs DDP on a cluster).

    python tools/train.py configs/demo_synthetic.py --work-dir work_dirs/demo
    python tools/train.py configs/swin_t_nuscenes.py --cfg-options data_root=/data/nuscenes trainer.devices=8
    python tools/train.py CONFIG --work-dir DIR --resume            # continue from DIR/checkpoints/last.ckpt
    python tools/train.py CONFIG --work-dir DIR --resume auto       # continue if there is a checkpoint (clusters)
    tools/dist_train.sh CONFIG 8 [--work-dir DIR ...]               # torchrun, one process per GPU
    sbatch tools/slurm_train.sh CONFIG WORK_DIR                      # SLURM, requeued with automatic resume

The work dir receives config.py (the resolved config), checkpoints/{last,best}.ckpt,
tensorboard/ and csv/ logs.
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
    parser.add_argument("config", help="config file (configs/*.py)")
    parser.add_argument("--work-dir", help="output directory (default: work_dirs/<config name>)")
    parser.add_argument("--resume", nargs="?", const=True, default=None,
                        help="resume from CKPT, or from the work dir's last checkpoint when no path is given "
                             "(an error if there is none); 'auto': the newest checkpoint if any, else start fresh")
    parser.add_argument("--devices", help="devices per node (overrides trainer.devices), e.g. 8 or 'auto'")
    parser.add_argument("--num-nodes", type=int, help="nodes (overrides trainer.num_nodes)")
    parser.add_argument("--strategy", help="e.g. ddp, fsdp (overrides trainer.strategy)")
    parser.add_argument("--seed", type=int, help="overrides the config's seed")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={},
                        help="override config keys, e.g. trainer.max_steps=20 data_root=/data/nuscenes")
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.config import load_config
    from perception.core.errors import PerceptionError
    from perception.data.label_cache import StaleCacheError, rebuild_command
    from perception.training.preemption import TrainingPreempted
    from perception.training.runner import train

    options = dict(args.cfg_options)
    if args.seed is not None:
        options["seed"] = args.seed
    if args.devices is not None:
        options["trainer.devices"] = int(args.devices) if args.devices.isdigit() else args.devices
    if args.num_nodes is not None:
        options["trainer.num_nodes"] = args.num_nodes
    if args.strategy is not None:
        options["trainer.strategy"] = args.strategy
    work_dir = args.work_dir or os.path.join("work_dirs", os.path.splitext(os.path.basename(args.config))[0])
    try:
        cfg = load_config(args.config, options)
        metrics = train(cfg, work_dir, resume=args.resume)
    except TrainingPreempted as stop:
        print(stop, file=sys.stderr)
        return stop.code
    except (PerceptionError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        if isinstance(error, StaleCacheError):
            print(f"  with this run's options: {rebuild_command(args.config, options)}", file=sys.stderr)
        return 2
    print("final metrics: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())
                                         if k.startswith(("train/", "val/"))))
    return 0


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
