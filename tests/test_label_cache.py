"""The label cache is built once, reused, and refuses to be used for other data or settings."""

from __future__ import annotations

import os
import shutil

import pytest

from perception.data.datamodule import ensure_label_cache
from perception.data.label_cache import StaleCacheError, load_label_cache


def test_cache_is_reused_and_stale_caches_are_errors(small_dataset, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data, ignore=shutil.ignore_patterns("perception_cache", "samples"))
    os.symlink(os.path.join(small_dataset, "samples"), data / "samples")
    cache = str(tmp_path / "cache")
    infos, directory = ensure_label_cache(str(data), "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 50.0)
    assert len(infos) == 4
    first_obstacles = infos[0]["obstacles"]
    assert len(first_obstacles["label"]) == len(first_obstacles["center_cam"]) == len(first_obstacles["box2d_xyxy"])
    mtime = os.path.getmtime(os.path.join(directory, "infos.json"))
    ensure_label_cache(str(data), "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 50.0)
    assert os.path.getmtime(os.path.join(directory, "infos.json")) == mtime  # reused, not rebuilt

    with pytest.raises(StaleCacheError, match="drivable_max_range.*tools/build_label_cache.py"):
        load_label_cache(str(data), "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 60.0)
    with pytest.raises(StaleCacheError, match="cameras"):
        load_label_cache(str(data), "v1.0-trainval", "synthetic_val", ["CAM_FRONT", "CAM_BACK"], cache, 50.0)

    # Tables edited after the cache was built: the cache is stale.
    annotations = data / "v1.0-trainval" / "sample_annotation.json"
    annotations.write_text(annotations.read_text() + "\n")
    with pytest.raises(StaleCacheError, match="source_files"):
        ensure_label_cache(str(data), "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 50.0)

    # A cache copied next to another dataset is foreign.
    other = tmp_path / "other"
    shutil.copytree(data, other, symlinks=True)
    with pytest.raises(StaleCacheError, match="data_root"):
        load_label_cache(str(other), "v1.0-trainval", "synthetic_val", ["CAM_FRONT"], cache, 50.0)


def test_unknown_split_names_the_file_to_edit(small_dataset):
    from perception.data.splits import scenes_of_split

    with pytest.raises(ValueError, match="splits.json.*synthetic_train"):
        scenes_of_split(small_dataset, "v1.0-trainval", "nightly")
    with pytest.raises(ValueError, match="v1.0-mini"):
        scenes_of_split(small_dataset, "v1.0-trainval", "mini_val")
