#!/usr/bin/env python
"""Export a trained model to ONNX, check it (onnx.checker, ONNX Runtime vs PyTorch) and write a sidecar.

    python tools/export_onnx.py configs/motion_synthetic.py work_dirs/motion/checkpoints/last.ckpt \
        --out work_dirs/motion/forecaster.onnx [--batch N | --dynamic-batch] [--opset 17]

Writes OUT and OUT's stem + .json (inputs, outputs, frames, versions, parity figures).
Motion (trajectory forecasting) configs are supported; the camera network's export is issue 6.
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
    parser.add_argument("checkpoint", help="training checkpoint; 'none' exports random weights (for deployment tests)")
    parser.add_argument("--out", required=True, help="ONNX file to write")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batch", type=int, help="fixed number of agents (TensorRT static shapes)")
    group.add_argument("--dynamic-batch", action="store_true", help="dynamic agent axis (the default)")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.build import build_motion_model
    from perception.config import ConfigError, MotionExperimentConfig, load_config, parse_config
    from perception.evaluation.checkpoint import CheckpointMismatchError, load_model_weights
    from perception.export.motion_onnx import export_forecaster

    try:
        cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
        if not isinstance(cfg, MotionExperimentConfig):
            raise ConfigError(f"{args.config} is a camera-perception config; its ONNX export is not built yet "
                              "(issue 6). Motion configs (task = 'motion') export today.")
        if args.batch is not None and args.batch < 1:
            raise ConfigError(f"--batch must be >= 1, got {args.batch}")
        model = build_motion_model(cfg)
        if args.checkpoint != "none":
            load_model_weights(model, args.checkpoint)
        with open(args.config) as f:
            config_text = f.read()
        sidecar = export_forecaster(model, args.out, cfg.data.max_lanes, batch=args.batch, opset=args.opset,
                                    config_text=config_text)
    except (ConfigError, CheckpointMismatchError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    parity = sidecar["parity"]
    print(f"wrote {args.out}: ONNX Runtime vs PyTorch on a second input (batch {parity['batch']}): "
          + ", ".join(f"max|diff| {k} {v:.2e}" for k, v in parity.items() if k != "batch"))
    return 0


if __name__ == "__main__":
    sys.exit(main(get_args_parser().parse_args()))
