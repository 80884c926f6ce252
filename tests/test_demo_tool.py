"""tools/demo.py draws every task on real-size images, video frames and nuScenes samples, with either runtime."""

from __future__ import annotations

import json
import os

import cv2
import numpy as np
import pytest
import torch
from conftest import ALL_HEADS, TINY_MODEL, experiment_dict
from test_camera_export import _wake_zero_layers

from perception.build import build_model
from perception.commands import demo
from perception.config import parse_config
from perception.drawing import bev_panel
from perception.export.camera_onnx import export_camera_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def demo_setup(small_dataset, tmp_path_factory):
    """A four-head config file on the small dataset, its random-weight checkpoint and ONNX export."""
    root = tmp_path_factory.mktemp("demo_tool")
    cfg_dict = experiment_dict(small_dataset, model=dict(TINY_MODEL, heads=ALL_HEADS),
                               bdd100k=dict(data_root=str(root / "no_bdd")))
    config_path = str(root / "config.py")
    with open(config_path, "w") as f:
        f.write("\n".join(f"{key} = {value!r}" for key, value in cfg_dict.items()))
    cfg = parse_config(cfg_dict)
    torch.manual_seed(0)
    model = build_model(cfg.model, tuple(cfg.input_size))
    _wake_zero_layers(model)
    checkpoint = str(root / "model.ckpt")
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, checkpoint)
    onnx_path = str(root / "model.onnx")
    export_camera_model(model, tuple(cfg.input_size), onnx_path, batch=2, fp16_images=2)
    # Real nuScenes camera size: the synthetic front images scaled to 1600x900.
    images = root / "images"
    images.mkdir()
    front = os.path.join(small_dataset, "samples", "CAM_FRONT")
    for name in sorted(os.listdir(front))[:3]:
        frame = cv2.resize(cv2.imread(os.path.join(front, name)), (1600, 900), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(str(images / name), frame)
    return {"config": config_path, "checkpoint": checkpoint, "onnx": onnx_path, "images": str(images),
            "data_root": small_dataset}


def _run(*argv: str) -> int:
    return demo.main(demo.get_args_parser().parse_args(list(argv)))


@pytest.mark.parametrize("runtime", ["--onnx", "--checkpoint"])
def test_demo_draws_every_task_on_real_size_images(demo_setup, tmp_path, runtime):
    out = str(tmp_path / "out")
    model = demo_setup["onnx"] if runtime == "--onnx" else demo_setup["checkpoint"]
    assert _run(demo_setup["config"], runtime, model, "--images", demo_setup["images"], "--out", out,
                "--min-score", "0", "--cfg-options", "postprocess.lane_score_threshold=0.0") == 0
    names = sorted(os.listdir(demo_setup["images"]))
    assert sorted(os.listdir(out)) == names
    for name in names:
        original = cv2.imread(os.path.join(demo_setup["images"], name))
        annotated = cv2.imread(os.path.join(out, name))
        assert annotated.shape == (900, 1600 + 900, 3)  # the camera image + a square BEV panel
        changed = np.abs(annotated[:, :1600].astype(int) - original.astype(int)).max(axis=2) > 40
        assert changed.mean() > 0.01, "nothing drawn on the camera image"
        empty_bev = cv2.cvtColor(bev_panel([], 900), cv2.COLOR_RGB2BGR).astype(int)
        boxes_in_bev = np.abs(annotated[:, 1600:].astype(int) - empty_bev).max(axis=2) > 40
        assert boxes_in_bev.mean() > 0.001, "no obstacle in the BEV panel"


def test_demo_outputs_agree_between_runtimes(demo_setup, tmp_path):
    for runtime, model in (("--onnx", demo_setup["onnx"]), ("--checkpoint", demo_setup["checkpoint"])):
        assert _run(demo_setup["config"], runtime, model, "--images", demo_setup["images"], "--out",
                    str(tmp_path / runtime.strip("-"))) == 0
    name = sorted(os.listdir(demo_setup["images"]))[0]
    from_onnx = cv2.imread(str(tmp_path / "onnx" / name)).astype(int)
    from_torch = cv2.imread(str(tmp_path / "checkpoint" / name)).astype(int)
    assert (np.abs(from_onnx - from_torch).max(axis=2) > 40).mean() < 0.001  # JPEG noise only


def test_demo_annotates_a_video(demo_setup, tmp_path):
    video = str(tmp_path / "drive.mp4")
    writer = cv2.VideoWriter(video, cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (640, 360))
    for name in sorted(os.listdir(demo_setup["images"])) * 2:
        writer.write(cv2.resize(cv2.imread(os.path.join(demo_setup["images"], name)), (640, 360)))
    writer.release()
    out = str(tmp_path / "out")
    assert _run(demo_setup["config"], "--onnx", demo_setup["onnx"], "--video", video, "--out", out,
                "--max-frames", "5") == 0
    capture = cv2.VideoCapture(os.path.join(out, "drive_annotated.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 5
    assert (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))) == (1000, 360)


def test_demo_draws_a_nuscenes_sample_with_its_calibration(demo_setup, tmp_path):
    with open(os.path.join(demo_setup["data_root"], "v1.0-trainval", "sample.json")) as f:
        token = json.load(f)[0]["token"]
    out = str(tmp_path / "out")
    assert _run(demo_setup["config"], "--onnx", demo_setup["onnx"], "--nuscenes-sample", token, "--out", out,
                "--min-score", "0") == 0
    written = sorted(os.listdir(out))
    assert len(written) == 7 and f"{token}_bev.jpg" in written and f"{token}_CAM_FRONT.jpg" in written
    assert cv2.imread(os.path.join(out, f"{token}_CAM_FRONT.jpg")).shape == (270, 480, 3)


def test_demo_rejects_a_model_of_another_input_size(demo_setup, tmp_path, capsys):
    code = _run(demo_setup["config"], "--onnx", demo_setup["onnx"], "--images", demo_setup["images"], "--out",
                str(tmp_path / "out"), "--cfg-options", "input_size=[224,224]")
    assert code == 2 and "takes (224, 448)" in capsys.readouterr().err


def test_demo_keeps_inputs_that_share_a_stem_apart_and_skips_a_bad_image(demo_setup, tmp_path, capsys):
    """Before: frame.jpg and frame.png both became frame.jpg ("wrote 2 file(s)", one lost) and one
    zero-byte image aborted the whole folder."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    first = sorted(os.listdir(demo_setup["images"]))[0]
    frame = cv2.imread(os.path.join(demo_setup["images"], first))
    cv2.imwrite(str(folder / "frame.jpg"), frame)
    cv2.imwrite(str(folder / "frame.png"), frame)
    (folder / "empty.jpg").write_bytes(b"")
    out = tmp_path / "out"
    assert _run(demo_setup["config"], "--onnx", demo_setup["onnx"], "--images", str(folder), "--out", str(out)) == 0
    assert sorted(os.listdir(out)) == ["frame_jpg.jpg", "frame_png.jpg"]
    printed = capsys.readouterr()
    assert "empty.jpg is empty" in printed.err and "skipped 1 unreadable image(s) of 3" in printed.err
    assert "wrote 2 file(s)" in printed.out


def test_evaluating_an_onnx_model_under_a_config_with_other_heads_is_an_error(demo_setup, tmp_path, capsys):
    """Before: a model without the lights head under a config with lights exited 0, lights/AP50 silently absent."""
    from perception.commands import test as test_tool
    args = test_tool.get_args_parser().parse_args([demo_setup["config"], "--onnx", demo_setup["onnx"], "--work-dir",
                                                   str(tmp_path / "eval"), "--cfg-options", "model.heads.lights=None"])
    assert test_tool.main(args) == 2
    err = capsys.readouterr().err
    assert "outputs for the tasks ['drivable', 'lanes', 'lights', 'obstacles']" in err
    assert "config enables ['drivable', 'lanes', 'obstacles']" in err
