"""Forecasting samples of one split, extracted once into a stamped ``.npz`` cache.

Layout: <cache_root>/<version>/motion_<split>.npz holding the arrays of
``extract_motion_samples``, the tokens, and ``key`` (JSON: what it was built from). A cache
built from other data or settings is an error that says how to rebuild, never silently used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from perception.data.label_cache import StaleCacheError, source_stamps
from perception.data.motion_samples import MotionDataSettings, extract_motion_samples, motion_tokens_of_split

MOTION_CACHE_FORMAT = 1


def motion_cache_path(cache_root: str, version: str, split: str) -> str:
    return os.path.join(cache_root, version, f"motion_{split}.npz")


def motion_cache_key(data_root: str, version: str, split: str, settings: MotionDataSettings, use_map: bool) -> dict:
    data_root = os.path.abspath(data_root)
    stamps = source_stamps(data_root, version, map_expansion=use_map, extra=("maps/prediction/prediction_scenes.json",))
    return {"format": MOTION_CACHE_FORMAT, "data_root": data_root, "version": version, "split": split,
            "settings": dataclasses.asdict(settings), "use_map": use_map, "source_files": stamps}


def load_motion_cache(data_root: str, version: str, split: str, settings: MotionDataSettings, use_map: bool,
                      cache_root: str) -> dict:
    """Arrays + ``tokens``; FileNotFoundError if missing, StaleCacheError if built from other inputs."""
    path = motion_cache_path(cache_root, version, split)
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    with np.load(path, allow_pickle=False) as archive:
        data = {name: archive[name] for name in archive.files}
    stored = json.loads(str(data.pop("key")))
    expected = motion_cache_key(data_root, version, split, settings, use_map)
    # Round-trip through JSON so tuples and lists compare equal.
    expected = json.loads(json.dumps(expected))
    differences = [k for k in expected if stored.get(k) != expected[k]]
    if differences:
        raise StaleCacheError(f"motion cache {path} was built from other data or settings ({', '.join(differences)} "
                              f"differ). Delete it; it is rebuilt on the next run.")
    data["tokens"] = [str(t) for t in data["tokens"]]
    return data


def build_motion_cache(data_root: str, version: str, split: str, settings: MotionDataSettings, use_map: bool,
                       cache_root: str, nusc=None, verbose: bool = True) -> str:
    from perception.data.tables import load_nuscenes

    start = time.time()
    tokens = motion_tokens_of_split(data_root, version, split)
    if not tokens:
        raise ValueError(f"split {split!r} of {data_root} has no prediction agents (maps/prediction/"
                         "prediction_scenes.json lists none for its scenes)")
    if nusc is None:
        nusc = load_nuscenes(data_root, version)
    arrays = extract_motion_samples(nusc, tokens, settings, use_map=use_map)
    key = motion_cache_key(data_root, version, split, settings, use_map)
    path = motion_cache_path(cache_root, version, split)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    staging = f"{path}.building-{os.getpid()}.npz"  # per process: concurrent builders never share a file
    np.savez(staging, tokens=np.array(tokens), key=np.array(json.dumps(key)), **arrays)
    os.replace(staging, path)  # atomic: a crash leaves no half-written cache
    if verbose:
        print(f"motion cache: {len(tokens)} agents of split {split!r} -> {path} ({time.time() - start:.1f} s)")
    return path


def ensure_motion_cache(data_root: str, version: str, split: str, settings: MotionDataSettings, use_map: bool,
                        cache_root: str) -> dict:
    try:
        return load_motion_cache(data_root, version, split, settings, use_map, cache_root)
    except FileNotFoundError:
        build_motion_cache(data_root, version, split, settings, use_map, cache_root)
        return load_motion_cache(data_root, version, split, settings, use_map, cache_root)
