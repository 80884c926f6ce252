"""Write a small synthetic dataset in the real nuScenes on-disk format.

    python tools/make_synthetic_nuscenes.py data/synthetic_nuscenes --scenes 12 --samples-per-scene 16 \
        --cameras 6 --image-size 800x450 --seed 0

The real nuscenes-devkit (NuScenes, NuScenesMap, DetectionEval, PredictHelper) loads the result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")


def get_args_parser() -> argparse.ArgumentParser:
    from perception.commands import image_size

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="dataset root to write (created)")
    parser.add_argument("--scenes", type=int, default=10)
    parser.add_argument("--samples-per-scene", type=int, default=16, help="keyframes per scene (2 Hz)")
    parser.add_argument("--cameras", type=int, choices=(0, 1, 6), default=6,
                        help="cameras per sample; 0 writes no images (enough for motion forecasting)")
    parser.add_argument("--image-size", type=image_size, default="800x450",
                        help="WxH of the camera images")
    parser.add_argument("--val-scenes", type=int, default=2, help="scenes in the validation split (the last ones)")
    parser.add_argument("--version", default="v1.0-trainval", help="table folder name, e.g. v1.0-trainval, v1.0-mini")
    parser.add_argument("--scene-names", default=None, help="comma-separated scene names (default scene-0001, ...)")
    parser.add_argument("--train-split", default="synthetic_train")
    parser.add_argument("--val-split", default="synthetic_val")
    parser.add_argument("--workers", type=int, default=2, help="processes rendering scenes in parallel")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes

    width, height = args.image_size  # parsed by argparse (commands.image_size)
    spec = SyntheticSpec(scenes=args.scenes, samples_per_scene=args.samples_per_scene, cameras=args.cameras,
                         image_size=(width, height), val_scenes=args.val_scenes, seed=args.seed,
                         version=args.version, train_split=args.train_split, val_split=args.val_split,
                         scene_names=tuple(args.scene_names.split(",")) if args.scene_names else None,
                         workers=args.workers)
    start = time.time()
    counts = write_synthetic_nuscenes(args.out, spec)
    print(f"wrote {args.out} in {time.time() - start:.1f} s: "
          + ", ".join(f"{n} {name}" for name, n in counts.items()))
    return 0


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
