"""Build (or rebuild with --force) the label cache of a config's splits.

    python tools/build_label_cache.py configs/swin_t_nuscenes.py --cfg-options data_root=/data/nuscenes
    python tools/build_label_cache.py CONFIG --split val --force

tools/train.py builds missing caches itself; this tool rebuilds stale ones and lets a cluster
job build them once before many GPUs start.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")


def get_args_parser() -> argparse.ArgumentParser:
    from mmengine.config import DictAction

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("--split", action="append", help="split(s) to build (default: train and val splits)")
    parser.add_argument("--force", action="store_true", help="rebuild even if a cache exists")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes extracting scenes in parallel (default: the usable cores, at most 8)")
    parser.add_argument("--cfg-options", nargs="+", action=DictAction, default={})
    return parser


def main(args: argparse.Namespace) -> int:
    from perception.config import load_config, parse_config
    from perception.core.errors import PerceptionError
    from perception.data.label_cache import (
        StaleCacheError,
        build_label_cache,
        default_cache_root,
        load_label_cache,
    )

    try:
        cfg = parse_config(load_config(args.config, dict(args.cfg_options)))
    except (PerceptionError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    cache_root = cfg.cache_root or default_cache_root(os.path.abspath(cfg.data_root))
    for split in args.split or sorted({cfg.train_split, cfg.val_split}):
        if not args.force:
            try:
                load_label_cache(cfg.data_root, cfg.version, split, cfg.cameras, cache_root, cfg.drivable_max_range)
                print(f"{split}: cache is up to date")
                continue
            except FileNotFoundError:
                pass
            except StaleCacheError as error:
                print(f"{split}: {error}\n  rebuilding", file=sys.stderr)
        try:
            # Without --force, a cache another process finishes while this one waits for the lock is kept.
            build_label_cache(cfg.data_root, cfg.version, split, cfg.cameras, cache_root, cfg.drivable_max_range,
                              only_if_missing=not args.force, workers=args.workers)
        except (PerceptionError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    from perception.commands import run_command

    sys.exit(run_command(sys.modules[__name__]))
