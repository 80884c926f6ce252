"""Export a trained model to TensorRT-ready ONNX, check it and write a sidecar JSON.

    python tools/export_onnx.py configs/demo_synthetic.py work_dirs/demo/checkpoints/last.ckpt \
        --out work_dirs/demo/model.onnx [--batch 6 | --dynamic-batch] [--opset 17] [--images DIR]
    python tools/export_onnx.py configs/swin_t_nuscenes_bdd100k.py none --out swin_t.onnx   # random weights

Camera configs export the whole network (backbone, neck, every head) at the config's fixed
H x W, batch 6 by default (six cameras, static shapes for TensorRT). The graph is simplified
(onnxsim) and must pass every deployment check (perception.export.graph_checks): no Shape /
Range / NonZero / If / Loop / ScatterND, float32 I/O, TensorRT 8.6 operators only, finite
constants, ONNX Runtime == PyTorch on a second input, and an FP16 activation report over real
images (``--images DIR``, else the config's validation split, else synthetic road images).
Writes OUT and OUT's stem + .json (input, pre-processing, outputs, class names, post-processing
parameters, versions, check results). Exit code 1 when a check fails (both files are still written).

``--int8`` also writes OUT's stem + .int8.onnx: the same network with explicit INT8 quantization (window
attention in timm's batched layout whatever ``model.backbone.onnx_window_attention`` says; see ``_export_camera``)
(QuantizeLinear / DequantizeLinear pairs, the form TensorRT 8.6+/10 builds INT8 engines from without
a calibrator), calibrated on real images (``--calib-images DIR``, default the config's validation
split), with its own sidecar (calibration set, method, scales, what stays in float) and the same
structural checks (perception/export/int8.py). Evaluate it like the fp32 model:
``tools/test.py CONFIG --onnx OUT.int8.onnx``.

Motion (trajectory forecasting) configs export the forecaster (dynamic agent axis by default).
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
    group.add_argument("--batch", type=int, help="fixed batch (camera default 6: one nuScenes sample)")
    group.add_argument("--dynamic-batch", action="store_true", help="dynamic batch axis (motion default)")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--images", help="folder of camera images for the parity check and the FP16 report")
    parser.add_argument("--int8", action="store_true", help="also write OUT.int8.onnx (Q/DQ, calibrated)")
    parser.add_argument("--calib-images", help="folder of calibration images (default: the validation split)")
    parser.add_argument("--calib-count", type=int, default=48, help="calibration images (default 48)")
    parser.add_argument("--calib-method", default="percentile", choices=("percentile", "minmax"))
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.config import ConfigError, MotionExperimentConfig, load_config, parse_config
    from perception.core.errors import PerceptionError
    from perception.export.graph_checks import ExportCheckError

    try:
        cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
        if args.batch is not None and args.batch < 1:
            raise ConfigError(f"--batch must be >= 1, got {args.batch}")
        with open(args.config) as f:
            config_text = f.read()
        _check_writable(args.out)  # before minutes of export checks, not after
        if isinstance(cfg, MotionExperimentConfig):
            return _export_motion(cfg, args, config_text)
        return _export_camera(cfg, args, config_text)
    except ExportCheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (PerceptionError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # e.g. the disk filled up while writing
        print(f"error: could not write {args.out} or its sidecar: {error}", file=sys.stderr)
        return 2


def _check_writable(out: str) -> None:
    from perception.config import ConfigError

    directory = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--out {out}: cannot create the folder {directory} ({error.strerror}); "
                          "choose a writable --out") from error
    if not os.access(directory, os.W_OK):
        raise ConfigError(f"--out {out}: the folder {directory} is not writable; choose a writable --out")


def _export_camera(cfg, args: argparse.Namespace, config_text: str) -> int:
    from dataclasses import asdict

    from perception.build import build_model
    from perception.core.checkpoint import load_model_weights
    from perception.export.camera_onnx import export_camera_model
    from perception.inference.images import folder_inputs, validation_inputs
    from perception.models.window_attention import exported_window_attention

    model = build_model(cfg.model, tuple(cfg.input_size))
    if args.checkpoint != "none":
        load_model_weights(model, args.checkpoint)
    batch = None if args.dynamic_batch else (args.batch or 6)
    count = max(batch or 1, 6)
    if args.images:
        images, source = folder_inputs(args.images, tuple(cfg.input_size), count), f"images of {args.images}"
    else:
        images, source = validation_inputs(cfg, count), f"validation images of {cfg.data_root}"
    def export(path: str) -> dict:
        return export_camera_model(model, tuple(cfg.input_size), path, batch=batch, opset=args.opset,
                                   config_text=config_text, postprocess=asdict(cfg.postprocess), check_images=images,
                                   check_images_source=source, tasks=cfg.model.heads.enabled)

    sidecar = export(args.out)
    checks = sidecar["checks"]
    # Heads compared as query sets (near-equal scores may reorder their top-k queries): reported as such.
    as_sets = checks["parity"].get("query_sets", {})
    by_position = {name: d for name, d in checks["parity"]["outputs"].items() if name.split(".")[0] not in as_sets}
    worst = max((by_position or checks["parity"]["outputs"]).items(), key=lambda kv: kv[1]["max_abs_diff"])
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB, {checks['structure']['nodes']} nodes, "
          f"input {sidecar['input']['shape']}) and its sidecar; every deployment check passed")
    print(f"  ONNX Runtime vs PyTorch on {checks['parity']['inputs']}: "
          f"largest max|diff| {worst[1]['max_abs_diff']:.2e} "
          f"({worst[0]}; tolerance {checks['parity']['atol']:g} + {checks['parity']['rtol']:g} x max|output|)")
    for head, agreement in as_sets.items():
        print(f"  {head}: queries reordered (top-k over near-equal scores); {agreement['matched']} of "
              f"{agreement['queries']} match a query of the other side within tolerance")
    fp16 = checks["fp16"]
    print(f"  FP16 risk: largest |activation| {fp16['max_abs']:.3g} over {fp16['inputs']} images "
          f"({fp16['inputs_source']}); {len(fp16['flagged'])} node(s) above {fp16['flag_abs']:g}")
    if args.int8:
        if cfg.model.backbone.onnx_window_attention == "batched":
            return _export_int8(cfg, args, sidecar, args.out)
        # The Q/DQ copy is quantized from a graph with timm's batched window attention (exported and checked like
        # OUT, then removed): quantized per head, light AP50 moved +0.08 on the demo checkpoint (README, INT8).
        source = os.path.splitext(args.out)[0] + ".int8_source.onnx"
        try:
            with exported_window_attention(model, "batched"):
                export(source)
            return _export_int8(cfg, args, sidecar, source)
        finally:
            for leftover in (source, os.path.splitext(source)[0] + ".json"):
                if os.path.exists(leftover):
                    os.remove(leftover)
    return 0


def _export_int8(cfg, args: argparse.Namespace, fp32_sidecar: dict, fp32_source: str) -> int:
    """Quantize ``fp32_source`` (OUT, or OUT's batched-attention twin) into OUT.int8.onnx and its sidecar."""
    import json

    import onnx

    from perception.config import ConfigError
    from perception.export.graph_checks import ExportCheckError, check_structure
    from perception.export.int8 import int8_path_for, quantize_camera_model
    from perception.inference.images import folder_inputs, validation_inputs

    if args.calib_count < 1:
        raise ConfigError(f"--calib-count must be >= 1, got {args.calib_count}")
    if args.calib_images:
        images, source = folder_inputs(args.calib_images, tuple(cfg.input_size), args.calib_count), args.calib_images
    else:
        images, source = validation_inputs(cfg, args.calib_count), f"{cfg.data_root} split {cfg.val_split}"
    if images is None or len(images) == 0:
        raise ConfigError(f"no calibration images at {source}; give --calib-images DIR (real camera frames)")
    path = int8_path_for(args.out)
    int8 = quantize_camera_model(fp32_source, path, images.numpy(), args.calib_method)
    int8["window_attention"] = "batched"  # timm's layout in the Q/DQ graph, whatever OUT's
    int8["calibration"]["source"] = source
    structure = check_structure(onnx.load(path), dynamic_batch=args.dynamic_batch)
    sidecar = dict(fp32_sidecar, int8=int8, fp32_model=os.path.basename(args.out))
    sidecar["checks"] = dict(fp32_sidecar["checks"], structure={k: v for k, v in structure.items() if k != "problems"},
                             int8_problems=structure["problems"])
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(sidecar, f, indent=1)
    if structure["problems"]:
        raise ExportCheckError(f"{path} failed the structural checks:\n  " + "\n  ".join(structure["problems"]))
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB): {int8['quantize_nodes']} Q/DQ pairs, calibrated on "
          f"{int8['calibration']['images']} images of {source} ({args.calib_method}); in float: softmax, norms, "
          f"sampling, the lane and light heads and the output projections ({len(int8['kept_in_float'])} layers); "
          "structural checks passed")
    return 0


def _export_motion(cfg, args: argparse.Namespace, config_text: str) -> int:
    from perception.build import build_motion_model
    from perception.core.checkpoint import load_model_weights
    from perception.export.motion_onnx import export_forecaster

    model = build_motion_model(cfg)
    if args.checkpoint != "none":
        load_model_weights(model, args.checkpoint)
    sidecar = export_forecaster(model, args.out, cfg.data.max_lanes, batch=args.batch, opset=args.opset,
                                config_text=config_text)
    parity = sidecar["parity"]
    print(f"wrote {args.out}: ONNX Runtime vs PyTorch on a second input (batch {parity['batch']}): "
          + ", ".join(f"max|diff| {k} {v:.2e}" for k, v in parity.items() if k != "batch"))
    return 0


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
