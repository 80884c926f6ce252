"""Write a small synthetic dataset in the BDD100K on-disk layout (traffic lights with colour, lanes, drivable masks).

    python tools/make_synthetic_bdd100k.py data/synthetic_bdd100k --videos 12 --frames-per-video 16 \
        --image-size 640x360 --seed 0

perception.data.bdd100k reads the result exactly like the public BDD100K release.
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
    parser.add_argument("--videos", type=int, default=8, help="drives; each gives frames to one split")
    parser.add_argument("--frames-per-video", type=int, default=12)
    parser.add_argument("--val-videos", type=int, default=2, help="drives in the val split (the last ones)")
    parser.add_argument("--image-size", type=image_size, default="640x360",
                        help="WxH of the images (BDD100K itself: 1280x720)")
    parser.add_argument("--workers", type=int, default=2, help="processes rendering drives in parallel")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.synthetic.bdd100k_writer import Bdd100kSyntheticSpec, write_synthetic_bdd100k

    width, height = args.image_size  # parsed by argparse (commands.image_size)
    spec = Bdd100kSyntheticSpec(videos=args.videos, frames_per_video=args.frames_per_video,
                                val_videos=args.val_videos, image_size=(width, height), seed=args.seed,
                                workers=args.workers)
    start = time.time()
    try:
        counts = write_synthetic_bdd100k(args.out, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"synthetic BDD100K at {args.out}: {counts} frames ({time.time() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
