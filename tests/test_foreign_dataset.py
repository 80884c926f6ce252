"""tools/train.py and tools/test.py on a nuScenes-format dataset laid out like real v1.0-mini.

The dataset is rewritten after generation so that it carries what real nuScenes has and our
generator does not write: 1600x900 images, official mini scene names and splits (no
splits.json), radar sensors, non-keyframe camera sweeps, tables in another order, no
category index. The tools are pointed at it with --cfg-options only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perception.synthetic.nuscenes_writer import SyntheticSpec, write_synthetic_nuscenes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _foreignise(root: str) -> None:
    tables = os.path.join(root, "v1.0-mini")
    os.remove(os.path.join(tables, "splits.json"))

    def load(name):
        with open(os.path.join(tables, f"{name}.json")) as f:
            return json.load(f)

    def save(name, records):
        with open(os.path.join(tables, f"{name}.json"), "w") as f:
            json.dump(records, f)

    categories = load("category")
    for record in categories:
        record.pop("index", None)
    save("category", categories[::-1])
    sensors = load("sensor") + [{"token": f"radar{i}", "channel": c, "modality": "radar"}
                                for i, c in enumerate(["RADAR_FRONT", "RADAR_BACK_LEFT"])]
    save("sensor", sensors)
    calibrated = load("calibrated_sensor")
    calibrated += [{"token": f"calib-radar{i}", "sensor_token": f"radar{i}", "translation": [3.4, 0.0, 0.5],
                    "rotation": [1.0, 0.0, 0.0, 0.0], "camera_intrinsic": []} for i in range(2)]
    save("calibrated_sensor", calibrated)
    # Non-keyframe camera sweeps between keyframes (files absent: nothing may read them).
    sample_data = load("sample_data")
    poses = load("ego_pose")
    sweeps = []
    for record in sample_data:
        if record["fileformat"] == "jpg" and record["next"]:
            token = record["token"] + "-sweep"
            sweeps.append(dict(record, token=token, is_key_frame=False, timestamp=record["timestamp"] + 83_000,
                               ego_pose_token=token, filename=record["filename"].replace("samples/", "sweeps/"),
                               prev=record["token"], next=record["next"]))
            poses.append(dict(next(p for p in poses if p["token"] == record["ego_pose_token"]), token=token))
    save("sample_data", sweeps + sample_data)
    save("ego_pose", poses[::-1])


@pytest.mark.slow
@pytest.mark.extended  # 37 s
def test_tools_train_and_test_on_a_mini_like_dataset(tmp_path):
    root = str(tmp_path / "nuscenes")
    spec = SyntheticSpec(scenes=2, samples_per_scene=2, cameras=6, image_size=(1600, 900), val_scenes=1,
                         version="v1.0-mini", scene_names=("scene-0061", "scene-0103"), seed=11)
    write_synthetic_nuscenes(root, spec)
    _foreignise(root)
    work_dir = str(tmp_path / "work")
    env = dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1", HF_HUB_OFFLINE="1")
    options = [f"data_root={root}", "version=v1.0-mini", "train_split=mini_train", "val_split=mini_val",
               "batch_size=4", "num_workers=0", "trainer.max_steps=2", "trainer.val_check_interval=2",
               "trainer.enable_progress_bar=False",
               # nuScenes only: no BDD100K-format data, hence no traffic-light head (no light labels).
               "bdd100k=None", "model.heads.lights=None"]
    result = subprocess.run([sys.executable, "tools/train.py", "configs/demo_synthetic.py", "--work-dir", work_dir,
                             "--cfg-options", *options], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = os.path.join(work_dir, "checkpoints", "last.ckpt")
    assert os.path.isfile(checkpoint)
    result = subprocess.run([sys.executable, "tools/test.py", "configs/demo_synthetic.py", checkpoint, "--work-dir",
                             work_dir, "--cfg-options", *options], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.load(open(os.path.join(work_dir, "metrics.json")))
    assert metrics["eval/num_images"] == 2 * 6  # one mini_val scene of 2 keyframes, 6 cameras
    assert 0.0 <= metrics["drivable/IoU"] <= 1.0


def test_train_tool_rejects_unknown_keys_before_training(tmp_path):
    result = subprocess.run([sys.executable, "tools/train.py", "configs/demo_synthetic.py", "--work-dir",
                             str(tmp_path), "--cfg-options", "trainer.max_step=3"], cwd=REPO,
                            capture_output=True, text=True, env=dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1"))
    assert result.returncode == 2
    assert "Did you mean 'max_steps'" in result.stderr
