"""Draw a model's predictions: drivable area, lanes, traffic lights with state, projected 3D boxes and a BEV.

    python tools/demo.py CONFIG --checkpoint CKPT --images DIR --out OUT          # PyTorch
    python tools/demo.py CONFIG --onnx model.onnx --images DIR --out OUT          # ONNX Runtime
    python tools/demo.py CONFIG --onnx model.onnx --video drive.mp4 --out OUT [--max-frames 300]
    python tools/demo.py CONFIG --checkpoint CKPT --nuscenes-sample TOKEN --out OUT

Images of any size (e.g. real 1600x900 nuScenes frames) go through the evaluation's pre-processing
and post-processing (perception.inference.pipeline). Folder images and video frames become
OUT/<name>.jpg / OUT/<video>_annotated.mp4 with the BEV panel on the right; their 3D boxes use
``--intrinsics fx,fy,cx,cy`` (original pixels) or a nuScenes front camera scaled to the image.
A nuScenes sample (the config's data_root and version) uses each camera's calibration and writes
OUT/<token>_<CAMERA>.jpg plus OUT/<token>_bev.jpg with every camera's boxes in the ego frame.
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
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="training checkpoint (PyTorch)")
    model.add_argument("--onnx", help="exported model (ONNX Runtime)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", help="folder of camera images")
    source.add_argument("--video", help="video file")
    source.add_argument("--nuscenes-sample", help="sample token of the config's nuScenes dataset")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--intrinsics", help="fx,fy,cx,cy of the folder images / video in original pixels")
    parser.add_argument("--min-score", type=float, default=0.3,
                        help="draw obstacles and lights above this score (lanes: --cfg-options "
                        "postprocess.lane_score_threshold=...)")
    parser.add_argument("--max-frames", type=int, default=None, help="stop a video after this many frames")
    parser.add_argument("--batch", type=int, default=6, help="images per network call")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.config import ConfigError, MotionExperimentConfig, load_config, parse_config
    from perception.core.errors import PerceptionError

    try:
        cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
        if isinstance(cfg, MotionExperimentConfig):
            raise ConfigError(f"{args.config} is a motion config; the demo draws camera predictions")
        perceiver = _perceiver(cfg, args)
        os.makedirs(args.out, exist_ok=True)
        if args.images:
            written = _run_folder(perceiver, args)
        elif args.video:
            written = _run_video(perceiver, args)
        else:
            written = _run_nuscenes_sample(perceiver, cfg, args)
    except (PerceptionError, FileNotFoundError, ValueError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} file(s) to {args.out}")
    return 0


def _perceiver(cfg, args):
    from dataclasses import replace

    from perception.inference.pipeline import Perceiver
    from perception.inference.predictors import OnnxPredictor, TorchPredictor

    input_size = tuple(cfg.input_size)
    predictor = (OnnxPredictor(args.onnx, expected_input_size=input_size) if args.onnx
                 else TorchPredictor(cfg, args.checkpoint))
    # Decode down to the drawing threshold (the config's thresholds are the evaluation's operating points).
    thresholds = cfg.postprocess
    post = replace(thresholds, obstacle_score_threshold=min(thresholds.obstacle_score_threshold, args.min_score),
                   light_score_threshold=min(thresholds.light_score_threshold, args.min_score))
    return Perceiver(predictor, input_size, post, cfg.model.heads.enabled)


def _intrinsics(args, width: int, height: int):
    import numpy as np

    from perception.inference.pipeline import default_intrinsics

    if not args.intrinsics:
        return default_intrinsics(width, height)
    try:
        fx, fy, cx, cy = (float(v) for v in args.intrinsics.split(","))
    except ValueError:
        raise ValueError(f"--intrinsics must be fx,fy,cx,cy (four numbers), got {args.intrinsics!r}") from None
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def _save(path: str, image_rgb) -> str:
    import cv2

    if not cv2.imwrite(path, cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR)):
        raise FileNotFoundError(f"could not write {path}")
    return path


def output_names(paths: list[str]) -> dict[str, str]:
    """Drawing file name per input image: ``<stem>.jpg``, or ``<stem>_<ext>.jpg`` where inputs share a
    stem (``frame.jpg`` and ``frame.png`` must not overwrite each other)."""
    stems = [os.path.splitext(os.path.basename(p)) for p in paths]
    counts: dict[str, int] = {}
    for stem, _ in stems:
        counts[stem] = counts.get(stem, 0) + 1
    return {p: (f"{stem}_{ext.lstrip('.').lower()}.jpg" if counts[stem] > 1 else f"{stem}.jpg")
            for p, (stem, ext) in zip(paths, stems)}


def _run_folder(perceiver, args) -> list[str]:
    from perception.data.camera_dataset import ImageReadError, read_image_rgb
    from perception.inference.annotate import annotate
    from perception.inference.images import list_images

    paths, written, skipped = list_images(args.images), [], []
    names = output_names(paths)
    for start in range(0, len(paths), args.batch):
        chunk, images = [], []
        for path in paths[start:start + args.batch]:
            try:
                images.append(read_image_rgb(path))
                chunk.append(path)
            except ImageReadError as error:  # one bad file must not abort the folder
                print(f"warning: skipped {error}", file=sys.stderr)
                skipped.append(path)
        if not chunk:
            continue
        intrinsics = [_intrinsics(args, im.shape[1], im.shape[0]) for im in images]
        for path, image, k, prediction in zip(chunk, images, intrinsics, perceiver(images, intrinsics)):
            drawn = annotate(image, prediction, k, perceiver.tasks, args.min_score)
            written.append(_save(os.path.join(args.out, names[path]), drawn))
    if skipped:
        print(f"skipped {len(skipped)} unreadable image(s) of {len(paths)}", file=sys.stderr)
    if not written:
        raise ImageReadError(f"none of the {len(paths)} images of {args.images} could be read")
    return written


def _run_video(perceiver, args) -> list[str]:
    import cv2

    from perception.inference.annotate import annotate

    capture = cv2.VideoCapture(args.video)
    if not capture.isOpened():
        raise FileNotFoundError(f"video {args.video} could not be opened")
    fps = capture.get(cv2.CAP_PROP_FPS) or 10.0
    out_path = os.path.join(args.out, os.path.splitext(os.path.basename(args.video))[0] + "_annotated.mp4")
    writer, frames, done = None, 0, False
    try:
        while not done:
            batch = []
            while len(batch) < args.batch:
                ok, frame = capture.read()
                if not ok or (args.max_frames is not None and frames + len(batch) >= args.max_frames):
                    done = True
                    break
                batch.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
            if not batch:
                break
            k = _intrinsics(args, batch[0].shape[1], batch[0].shape[0])
            for image, prediction in zip(batch, perceiver(batch, [k] * len(batch))):
                annotated = annotate(image, prediction, k, perceiver.tasks, args.min_score)
                if writer is None:
                    size = (annotated.shape[1], annotated.shape[0])
                    writer = cv2.VideoWriter(out_path, cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
                writer.write(cv2.cvtColor(annotated, cv2.COLOR_RGB2BGR))
            frames += len(batch)
    finally:
        capture.release()
        if writer is not None:
            writer.release()
    if frames == 0:
        raise ValueError(f"video {args.video} has no readable frames")
    return [out_path]


def _run_nuscenes_sample(perceiver, cfg, args) -> list[str]:
    import numpy as np
    from nuscenes.nuscenes import NuScenes

    from perception.core.geometry import transform_matrix
    from perception.data.camera_dataset import read_image_rgb
    from perception.drawing import bev_panel, camera_bev_entries
    from perception.inference.annotate import annotate

    nusc = NuScenes(version=cfg.version, dataroot=cfg.data_root, verbose=False)
    sample = nusc.get("sample", args.nuscenes_sample)
    cameras = [c for c in cfg.cameras if c in sample["data"]]
    images, intrinsics, ego_from_cameras = [], [], []
    for camera in cameras:
        record = nusc.get("sample_data", sample["data"][camera])
        calibration = nusc.get("calibrated_sensor", record["calibrated_sensor_token"])
        images.append(read_image_rgb(os.path.join(cfg.data_root, record["filename"])))
        intrinsics.append(np.asarray(calibration["camera_intrinsic"], np.float64))
        ego_from_cameras.append(transform_matrix(calibration["rotation"], calibration["translation"]))
    predictions = perceiver(images, intrinsics)
    written, entries = [], []
    for camera, image, k, ego_from_camera, prediction in zip(cameras, images, intrinsics, ego_from_cameras,
                                                             predictions):
        path = os.path.join(args.out, f"{args.nuscenes_sample}_{camera}.jpg")
        written.append(_save(path, annotate(image, prediction, k, perceiver.tasks, args.min_score, with_bev=False)))
        # Camera frame -> ego frame (x forward, y left); BEV: right = -y, forward = x.
        rotation, translation = ego_from_camera[:3, :3], ego_from_camera[:3, 3]
        for name, score, centre_xz, yaw_cam, size in camera_bev_entries(prediction.obstacles, args.min_score) \
                if prediction.obstacles is not None else []:
            centre = rotation @ np.array([centre_xz[0], 0.0, centre_xz[1]]) + translation
            heading = rotation @ np.array([np.sin(yaw_cam), 0.0, np.cos(yaw_cam)])
            entries.append((name, score, np.array([-centre[1], centre[0]]), float(np.arctan2(-heading[1], heading[0])),
                            size))
    bev = bev_panel(entries, 900, surround=True)
    written.append(_save(os.path.join(args.out, f"{args.nuscenes_sample}_bev.jpg"), bev))
    return written


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
