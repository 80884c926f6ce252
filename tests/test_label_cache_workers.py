"""The label cache built by several processes is the one a single process builds, and a worker's error reaches
the caller with its message."""

import filecmp
import json
import os
import re
import shutil

import pytest

from perception.data.label_cache import build_label_cache
from perception.data.tables import DatasetError

CAMERAS = ["CAM_FRONT", "CAM_BACK", "CAM_FRONT_LEFT"]


def test_parallel_build_writes_the_same_cache_as_one_process(small_dataset, tmp_path):
    built = {}
    for workers in (1, 2):
        built[workers] = build_label_cache(small_dataset, "v1.0-trainval", "synthetic_train", CAMERAS,
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
            build_label_cache(str(root), "v1.0-trainval", split, CAMERAS, str(tmp_path / "cache"), verbose=False,
                              workers=2)
    leftovers = [name for name in os.listdir(tmp_path / "cache" / "v1.0-trainval") if ".building-" in name]
    assert len(leftovers) <= 1  # at most the failed build's own staging folder; no cache was renamed into place
