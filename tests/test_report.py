"""The evaluation report (tools/test.py --report): every section filled, every image it references on disk,
and (where Chromium is installed) the page renders in a real headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from conftest import ALL_HEADS, TINY_MODEL, experiment_dict
from test_camera_export import _wake_zero_layers

from perception.build import build_model
from perception.commands import test as test_command
from perception.config import parse_config

SECTIONS = ("run", "metrics", "obstacles", "lanes", "lights", "gallery")


@pytest.fixture(scope="module")
def report(small_dataset, bdd_dataset, tmp_path_factory):
    """A four-head model with random (woken) weights evaluated with --report on nuScenes- and BDD100K-format data."""
    root = tmp_path_factory.mktemp("report")
    # Every query kept: random weights score near the focal prior (0.01), and whether any box clears the
    # default 0.05 would depend on the initialisation; the report needs detections to plot.
    cfg_dict = experiment_dict(small_dataset, model=dict(TINY_MODEL, heads=ALL_HEADS),
                               bdd100k=dict(data_root=bdd_dataset, train_split="train", val_split="val"),
                               postprocess=dict(obstacle_score_threshold=0.0, light_score_threshold=0.0))
    config_path = str(root / "config.py")
    with open(config_path, "w") as f:
        f.write("\n".join(f"{key} = {value!r}" for key, value in cfg_dict.items()))
    torch.manual_seed(0)
    model = build_model(parse_config(cfg_dict).model, tuple(cfg_dict["input_size"]))
    _wake_zero_layers(model)  # a model that detects something, so every plot has content
    checkpoint = str(root / "model.ckpt")
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, checkpoint)
    work_dir = str(root / "eval")
    args = test_command.get_args_parser().parse_args([config_path, checkpoint, "--work-dir", work_dir, "--report"])
    assert test_command.main(args) == 0
    return os.path.join(work_dir, "report")


def test_every_section_has_content_and_every_image_exists(report):
    page = open(os.path.join(report, "index.html")).read()
    for section in SECTIONS:
        body = re.search(rf"<section id='{section}'>(.*?)</section>", page, re.S)
        assert body is not None, f"section {section} missing"
        text = re.sub(r"<[^>]+>", " ", body.group(1))
        assert len(text.split()) > 3 or "<img" in body.group(1), f"section {section} is empty"
    sources = re.findall(r"<img src='([^']+)'", page)
    assert len(sources) >= 15  # devkit curves, lane/light PR, confusion, AP plots, gallery frames
    for source in sources:
        path = os.path.join(report, source)
        assert os.path.isfile(path) and os.path.getsize(path) > 1000, source
    # The devkit's own renderers drew the detection curves; every task has gallery frames.
    assert os.path.isfile(os.path.join(report, "nuscenes_plots", "summary.png"))
    for task in ("obstacles", "lanes", "lights", "drivable"):
        assert f"gallery/{task}_best_0.jpg" in page
    assert "config hash" in page and "SHA-256" in page


def test_report_metrics_include_distance_bands_and_bdd100k_definitions(report):
    metrics = json.load(open(os.path.join(os.path.dirname(report), "metrics.json")))
    for key in ("nuscenes/AP_0-20m", "nuscenes/AP_20-30m", "nuscenes/AP_30-50m", "lanes/F1_pix1_bdd100k",
                "lanes/F1_pix2_bdd100k", "lanes/F1_pix5_bdd100k", "drivable/mIoU_bdd100k"):
        assert key in metrics, key
    for bound in (1, 2, 5):  # looser bounds can only score higher
        assert 0.0 <= metrics[f"lanes/F1_pix{bound}_bdd100k"] <= 1.0
    assert metrics["lanes/F1_pix1_bdd100k"] <= metrics["lanes/F1_pix2_bdd100k"] <= metrics["lanes/F1_pix5_bdd100k"]


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no Chromium installed (Debian: apt-get install chromium)")
def test_report_renders_in_a_headless_browser(report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    screenshot = str(tmp_path / "report.png")
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             f"--screenshot={screenshot}", "--window-size=1400,4000",
                             "file://" + os.path.join(report, "index.html")], capture_output=True, text=True,
                            timeout=120)
    assert os.path.isfile(screenshot), result.stderr[-2000:]
    import cv2

    image = cv2.imread(screenshot)
    assert image is not None and image.shape[:2] == (4000, 1400)
    # A rendered page: text, tables and figures mark the white background.
    assert (image.min(axis=-1) < 250).mean() > 0.02  # a blank or broken page: ~0
