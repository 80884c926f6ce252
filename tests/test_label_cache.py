"""The label cache is built once, reused, and refuses to be used for other data or settings; built by several
processes it is the one a single process builds, and a worker's error reaches the caller with its message."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil

import pytest

from perception.data.datamodule import ensure_label_cache
from perception.data.label_cache import StaleCacheError, build_label_cache, load_label_cache
from perception.data.tables import DatasetError

THREE_CAMERAS = ["CAM_FRONT", "CAM_BACK", "CAM_FRONT_LEFT"]


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


def test_parallel_build_writes_the_same_cache_as_one_process(small_dataset, tmp_path):
    built = {}
    for workers in (1, 2):
        built[workers] = build_label_cache(small_dataset, "v1.0-trainval", "synthetic_train", THREE_CAMERAS,
                                           str(tmp_path / f"cache{workers}"), verbose=False, workers=workers)
    with open(os.path.join(built[1], "infos.json")) as f:
        one = json.load(f)
    with open(os.path.join(built[2], "infos.json")) as f:
        two = json.load(f)
    assert len({info["scene_name"] for info in one}) >= 2, "the split needs two scenes to exercise two workers"
    assert two == one  # same records in the same (scene, sample, camera) order
    masks = sorted(os.listdir(os.path.join(built[1], "masks")))
    assert masks == sorted(os.listdir(os.path.join(built[2], "masks"))) and len(masks) == len(one)
    _, mismatch, errors = filecmp.cmpfiles(os.path.join(built[1], "masks"), os.path.join(built[2], "masks"), masks,
                                           shallow=False)
    assert mismatch == [] and errors == []


def test_an_error_in_a_worker_names_the_record(small_dataset, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(small_dataset, root, ignore=shutil.ignore_patterns("perception_cache"))
    table = root / "v1.0-trainval" / "sample_data.json"
    records = json.loads(table.read_text())
    victim = next(r for r in records if r["filename"].startswith("samples/CAM_BACK/"))
    victim["filename"] = "../outside.jpg"
    table.write_text(json.dumps(records))
    pattern = re.escape(f"sample_data {victim['token']}: filename") + ".*leaves the data"
    with pytest.raises(DatasetError, match=pattern):
        for split in ("synthetic_train", "synthetic_val"):
            build_label_cache(str(root), "v1.0-trainval", split, THREE_CAMERAS, str(tmp_path / "cache"), verbose=False,
                              workers=2)
    leftovers = [name for name in os.listdir(tmp_path / "cache" / "v1.0-trainval") if ".building-" in name]
    assert len(leftovers) <= 1  # at most the failed build's own staging folder; no cache was renamed into place
