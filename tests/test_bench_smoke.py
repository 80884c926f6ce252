"""Every benchmark script runs at toy size (a smoke run: no figures are checked, only that it works).

Benchmarks measure; these tests keep them from rotting when the code they time changes
(bench/data_loading.py and bench/train_step_rate.py once crashed on targets missing new keys).
bench/gpu_deployment.py needs CUDA and runs under the ``gpu`` marker.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")


def run_bench(*args: str, timeout: int = 600) -> str:
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{args[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def load_bench_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_step_rate_smoke():
    out = run_bench("bench/train_step_rate.py", "--configs", "configs/demo_synthetic.py", "--steps", "1",
                    "--warmup", "0", "--batch-size", "2", "--precision", "fp32", "bf16", "--mixed", "--parts")
    assert "fp32" in out and "bf16" in out and out.count("steps/s") == 2
    assert out.count("every head on every image") == 2
    parts = [line for line in out.splitlines() if "parts (forward + backward)" in line]
    assert len(parts) == 2 and all(f"head {task}" in parts[0] for task in ("drivable", "obstacles", "lanes", "lights"))


def test_data_loading_smoke():
    out = run_bench("bench/data_loading.py", "--items", "2")
    assert "images/s per worker" in out


def test_network_cost_smoke():
    out = run_bench("bench/network_cost.py", "--config", "configs/demo_synthetic.py", "--batch", "1", "--runs", "1")
    assert "GFLOPs" in out or "GFLOP" in out


def test_forecast_latency_smoke():
    out = run_bench("bench/forecast_latency.py", "--batches", "1", "--repeats", "1")
    assert "ms" in out


@pytest.mark.slow
@pytest.mark.onnx
def test_deployment_latency_smoke():
    out = run_bench("bench/deployment_latency.py", "--config", "configs/demo_synthetic.py", "--batch", "1", "--runs",
                    "1", "--warmup", "0", "--threads", "2", "--yolop", "", "--isolated", "1",
                    "--cfg-options", "model.heads.lanes.num_layers=1")  # a variant: the options reach every job
    assert "ms" in out and "ONNX Runtime / eager" in out and "options model.heads.lanes.num_layers=1" in out
    assert "each graph in its own process" in out and "of the probe" in out
    assert "counted in the exported graph" in out


# The script's other modes run in the extended tier (CI, after `make test`): the same script, so a smoke run
# of each mode in `make test` would add a minute to its ~15-minute budget for little more coverage.
@pytest.mark.slow
@pytest.mark.onnx
@pytest.mark.extended
def test_deployment_latency_int8_smoke():
    out = run_bench("bench/deployment_latency.py", "--config", "configs/demo_synthetic.py", "--batch", "1", "--runs",
                    "1", "--warmup", "0", "--threads", "2", "--int8", "--yolop", "")
    assert "INT8 / fp32" in out


@pytest.mark.slow
def test_demo_resources_smoke(tmp_path):
    out = run_bench("bench/demo_resources.py", "--toy", "--out", str(tmp_path / "demo"))
    assert "total" in out and "SHA-256" in out and "eager latency" in out
    assert os.path.isfile(tmp_path / "demo" / "work" / "report" / "index.html")  # as make demo: with the report


@pytest.mark.slow
@pytest.mark.extended
def test_demo_resources_motion_smoke(tmp_path):
    out = run_bench("bench/demo_resources.py", "--toy", "--motion", "--out", str(tmp_path / "motion"))
    assert "total" in out and "motion/minADE_5" in out


@pytest.mark.slow
def test_convergence_study_smoke(small_dataset, bdd_dataset, tmp_path):
    out = run_bench("bench/convergence.py", "--variants", "demo", "no_dense", "--steps", "2", "--eval-every", "0",
                    "--out", str(tmp_path / "study"), "--cfg-options", f"data_root={small_dataset}",
                    f"bdd100k.data_root={bdd_dataset}", "trainer.val_check_interval=2", "val_batch_size=8")
    assert "| demo |" in out and "| no_dense |" in out
    assert os.path.isfile(tmp_path / "study" / "demo" / "curves.png")


def test_obstacle_error_smoke(small_dataset, bdd_dataset):
    out = run_bench("bench/obstacle_error.py", "configs/demo_synthetic.py", "--probe-epochs", "1", "--cfg-options",
                    f"data_root={small_dataset}", f"bdd100k.data_root={bdd_dataset}")
    assert "matched detections" in out and "rgb + box" in out and "neck + box" in out


def test_obstacle_error_foot_row_figures(capsys):
    """The foot-row comparison with random weights matches nothing, so its figures are checked here on hand-made
    rows: a foot row that gives every true depth scores 0, one that is 10 % short scores 0.1 raw and 0 scaled."""
    obstacle_error = load_bench_module("obstacle_error")
    rows = [dict(z=z, dz=0.1 * z, error=0.5, error_direction=0.1, error_depth=0.4, z_foot=0.9 * z, z_foot_true=z,
                 camera_height=1.5) for z in (5.0, 15.0, 25.0, 35.0)]
    obstacle_error.print_translation(rows)
    out = capsys.readouterr().out
    assert "camera 1.50 m" in out
    assert "the detection's 2D box all 0.100 / 0.000" in out
    assert "the true 2D box        all 0.000 / 0.000" in out


def test_lane_error_smoke(small_dataset, bdd_dataset):
    out = run_bench("bench/lane_error.py", "configs/demo_synthetic.py", "--cfg-options",
                    f"data_root={small_dataset}", f"bdd100k.data_root={bdd_dataset}")
    assert "oracle F1" in out and "by shape" in out


def test_lane_error_shapes_and_figures(capsys):
    """The lane breakdown's parts on hand-made lanes: a straight lane bends 0 px, an arc by its sagitta; the oracle
    matches one-to-one at IoU 0.5; the printed F1s count what the rows say."""
    import numpy as np

    lane_error = load_bench_module("lane_error")
    straight = np.array([[100.0, 200.0], [150.0, 100.0], [200.0, 0.0]])
    assert lane_error.bend_px(straight, 1.0) == pytest.approx(0.0)
    arc = np.array([[0.0, 0.0], [10.0, 50.0], [0.0, 100.0]])
    assert lane_error.bend_px(arc, 0.5) == pytest.approx(5.0)
    assert lane_error.median_dx_px(straight, straight + [3.0, 0.0], 2.0) == pytest.approx(6.0)
    assert lane_error.median_dx_px(straight, straight + [0.0, 500.0], 1.0) == float("inf")
    iou = np.array([[0.9, 0.6], [0.7, 0.1]])  # one-to-one: (0, 1) and (1, 0) beat (0, 0) alone
    assert lane_error.matched_truths(iou).tolist() == [True, True]
    assert lane_error.matched_truths(np.array([[0.4], [0.2]])).tolist() == [False]

    def row(bend, oracle, found, shipped):
        return dict(dataset="nuscenes", bend=bend, round_trip=1.0, best_iou=0.6 if oracle else 0.2, best_dx=3.0,
                    oracle=oracle, found=found, image_shipped=shipped, image_candidates=5)

    # 4 lanes: 3 within reach of a candidate, 2 found by 4 shipped lanes -> F1 2*2 / (4 + 2 + 2) = 0.5
    lane_error.print_lane_error([row(0.0, True, True, 4), row(1.0, True, True, 0), row(30.0, True, False, 0),
                                 row(40.0, False, False, 0)])
    out = capsys.readouterr().out
    assert "F1 shipped 0.500" in out and "oracle F1 (perfect scores, these candidates) 0.857" in out
    assert "straight      2   0.50" in out and "curved        2   0.50" in out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_deployment_smoke():
    run_bench("bench/gpu_deployment.py", "--runs", "1")
