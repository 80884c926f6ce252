"""Scene names of a split: the devkit's official splits, or custom ones from splits.json."""

from __future__ import annotations

import json
import os

from nuscenes.utils.splits import create_splits_scenes


def custom_splits_path(data_root: str, version: str) -> str:
    return os.path.join(data_root, version, "splits.json")


def scenes_of_split(data_root: str, version: str, split: str) -> list[str]:
    """Scene names of ``split`` for a dataset at ``data_root/version``.

    Official names (train, val, mini_train, ...) come from the devkit; anything else is read
    from ``<data_root>/<version>/splits.json`` = {"split_name": [scene names]}.
    """
    official = create_splits_scenes()
    if split in official:
        expected = "mini" if split.startswith("mini") else "test" if split == "test" else "trainval"
        if not version.endswith(expected):
            raise ValueError(
                f"split {split!r} is an official nuScenes split of v1.0-{expected}, but version is {version!r}. "
                f"Use a {expected} split, or define {split!r} in {custom_splits_path(data_root, version)}.")
        return list(official[split])
    path = custom_splits_path(data_root, version)
    if not os.path.isfile(path):
        raise ValueError(f"split {split!r} is not an official nuScenes split and {path} does not exist. "
                         f"Official splits: {sorted(official)}; custom splits go in that file as "
                         '{"name": [scene names]}.')
    with open(path) as f:
        custom = json.load(f)
    if split not in custom:
        raise ValueError(f"split {split!r} not found in {path}; it defines {sorted(custom)}")
    return list(custom[split])
