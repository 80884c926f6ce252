"""The exported camera network is TensorRT-ready and is the PyTorch network; the checks catch what they claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

import cv2
import numpy as np
import onnx
import pytest
import torch
from conftest import ALL_HEADS, TINY_MODEL, experiment_dict
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from perception.build import build_model
from perception.config import parse_config
from perception.export.camera_onnx import export_camera_model, synthetic_camera_images
from perception.export.graph_checks import (
    FORBIDDEN_OPS,
    ExportCheckError,
    check_structure,
    fp16_risk_report,
    output_differences,
    parity_problems,
    query_set_agreement,
)
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS
from perception.inference.predictors import OnnxPredictor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUT_SIZE = (224, 448)


def _wake_zero_layers(model: nn.Module) -> None:
    """Heads start some last layers at zero (constant outputs); give them small values so every output
    depends on the image and parity is tested on real numbers."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1 and not parameter.any():
                parameter.copy_(0.05 * torch.randn(parameter.shape, generator=generator))


@pytest.fixture(scope="module")
def four_task_model():
    torch.manual_seed(0)
    # drop_path_rate > 0 as in the real configs: timm's DropPath once traced into a graph 2e-3 off PyTorch.
    backbone = dict(TINY_MODEL["backbone"], drop_path_rate=0.2)
    # The lanes' optional snap to the marking map runs in the graph (GridSample + Softmax), and the obstacles'
    # deformable cross-attention (a GridSample per memory level; INT8 in the Q/DQ graph): both exported here too.
    heads = dict(ALL_HEADS, lanes=dict(ALL_HEADS["lanes"], marking_refinement=True),
                 obstacles=dict(ALL_HEADS["obstacles"], cross_attention="deformable"))
    cfg = parse_config(experiment_dict("unused", model=dict(TINY_MODEL, backbone=backbone, heads=heads),
                                       bdd100k=dict(data_root="unused")))
    model = build_model(cfg.model, INPUT_SIZE)
    _wake_zero_layers(model)
    return cfg, model.eval()


def test_fixed_batch_export_passes_every_deployment_check_and_is_the_pytorch_model(four_task_model, tmp_path):
    cfg, model = four_task_model
    path = str(tmp_path / "model.onnx")
    sidecar = export_camera_model(model, INPUT_SIZE, path, batch=2, config_text="# config",
                                  postprocess=asdict(cfg.postprocess))
    checks = sidecar["checks"]
    assert checks["passed"] and not checks["problems"]
    graph = onnx.load(path)
    ops = {node.op_type for node in graph.graph.node}
    assert not ops & FORBIDDEN_OPS and ops <= TENSORRT_8_6_OPS
    for value in list(graph.graph.input) + list(graph.graph.output):
        assert value.type.tensor_type.elem_type == TensorProto.FLOAT
        assert all(d.dim_value > 0 for d in value.type.tensor_type.shape.dim), value.name
    assert "TopK" in ops  # query selection is inside the graph, with a constant K

    outputs = checks["parity"]["outputs"]
    assert set(outputs) == set(sidecar["outputs"]) and len(outputs) == 14
    for name, difference in outputs.items():
        assert difference["max_abs_reference"] > 0, f"{name} is constant: parity would prove nothing"
        if name.split(".")[0] not in checks["parity"]["query_sets"]:  # else reordered by a top-k near-tie
            assert difference["max_abs_diff"] < 1e-4, (name, difference)
    assert checks["fp16"]["nodes_checked"] > 100 and checks["fp16"]["max_abs"] < 1e4 and not checks["fp16"]["flagged"]

    assert sidecar["input"]["shape"] == [2, 3, *INPUT_SIZE] and sidecar["input"]["colour_order"] == "RGB"
    assert sidecar["input"]["mean"] == pytest.approx([123.675, 116.28, 103.53])
    assert set(sidecar["class_names"]) >= {"drivable", "obstacles", "lanes", "lights"}
    assert sidecar["class_names"]["lights"] == ["red", "yellow", "green", "off"]
    assert all(entry["meaning"] for entry in sidecar["outputs"].values())
    assert sidecar["outputs"]["lanes.points"]["shape"] == [2, 20, 24]
    assert sidecar["postprocess"]["parameters"]["lane_score_threshold"] == cfg.postprocess.lane_score_threshold
    assert len(sidecar["config_sha256"]) == 64 and sidecar["package_version"]
    metadata = {p.key: p.value for p in graph.metadata_props}
    assert json.loads(metadata["input_shape"]) == [2, 3, *INPUT_SIZE] and metadata["colour_order"] == "RGB"
    assert json.loads(metadata["class_names"])["lanes"] == ["lane_divider", "road_divider"]

    # The predictor runs any number of images through the fixed-batch graph (the last chunk padded).
    predictor = OnnxPredictor(path)
    images = synthetic_camera_images(3, INPUT_SIZE, seed=7)
    _assert_same_outputs(predictor(images), model, images)
    with pytest.raises(ValueError, match="ONNX model takes"):
        predictor(torch.zeros(1, 3, 224, 224))


def test_dynamic_batch_export_runs_any_batch(four_task_model, tmp_path):
    _, model = four_task_model
    path = str(tmp_path / "dynamic.onnx")
    sidecar = export_camera_model(model, INPUT_SIZE, path, batch=None, fp16_images=1)
    assert sidecar["checks"]["passed"] and sidecar["outputs"]["obstacles.boxes"]["shape"] == ["batch", 60, 4]
    predictor = OnnxPredictor(path)
    assert predictor.batch is None
    for batch in (1, 3):
        images = synthetic_camera_images(batch, INPUT_SIZE, seed=20 + batch)
        _assert_same_outputs(predictor(images), model, images)


def _assert_same_outputs(got: dict, model: nn.Module, images: torch.Tensor) -> None:
    """Dense outputs element-wise; query outputs as sets (top-k near-ties may reorder queries)."""
    with torch.no_grad():
        expected = {k: v.numpy() for k, v in model(images).items()}
    got = {k: v.numpy() for k, v in got.items()}
    np.testing.assert_allclose(got["drivable.logits"], expected["drivable.logits"], atol=1e-4)
    for head in ("obstacles", "lanes", "lights"):
        names = [n for n in expected if n.startswith(f"{head}.")]
        agreement = query_set_agreement(expected, got, names, atol=1e-4, rtol=1e-4)
        assert agreement["matched"] >= 0.95 * agreement["queries"], (head, agreement)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_structure_check_names_every_problem():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    mask = numpy_helper.from_array(np.array([[0.0, -np.inf, 0.0]] * 3, np.float32), "mask")
    model = _model(
        [helper.make_node("Shape", ["x"], ["shape"], name="shape_of_x"),
         helper.make_node("Add", ["x", "mask"], ["masked"], name="add_mask"),
         helper.make_node("Det", ["x"], ["det"], name="determinant")],
        [x],
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("masked", TensorProto.FLOAT, [3, 3]),
         helper.make_tensor_value_info("det", TensorProto.FLOAT, [])],
        [mask])
    problems = "\n".join(check_structure(model)["problems"])
    assert "1 Shape node(s)" in problems and "shape_of_x" in problems
    assert "Det node(s): not in the TensorRT 8.6" in problems
    assert "graph output shape has type INT64" in problems
    assert "constant mask holds inf" in problems
    # A dynamic-batch graph may compute its batch size (Shape) but nothing else changes.
    assert "Shape node" not in "\n".join(check_structure(model, dynamic_batch=True)["problems"])


def test_fp16_report_flags_large_and_non_finite_activations(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    scale = numpy_helper.from_array(np.array(1e5, np.float32), "scale")
    model = _model([helper.make_node("Mul", ["x", "scale"], ["big"], name="scale_up"),
                    helper.make_node("Log", ["x"], ["log"], name="log_of_x"),
                    helper.make_node("Relu", ["x"], ["small"], name="relu")],
                   [x], [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in ("big", "log", "small")],
                   [scale])
    path = str(tmp_path / "fp16.onnx")
    onnx.save(model, path)
    feeds = [{"x": np.array([[0.5, -1.0, 2.0, 0.1]] * 2, np.float32)}]
    report = fp16_risk_report(path, feeds)
    assert [entry["node"] for entry in report["flagged"]] == ["scale_up"]
    assert report["max_abs"] == pytest.approx(2e5) and report["largest"][0]["op"] == "Mul"
    assert report["non_finite"] == ["log"]  # log(-1) is NaN already in fp32


class _BranchOnImage(nn.Module):
    """Python control flow on tensor values: tracing freezes the branch of the trace input."""

    def forward(self, images):
        factor = 2.0 if float(images.mean()) > 0 else 3.0
        return {"drivable.logits": nn.functional.avg_pool2d(images[:, :2], 4) * factor}


def test_export_refuses_a_graph_that_differs_from_pytorch(tmp_path):
    path = str(tmp_path / "branch.onnx")
    traced_like = synthetic_camera_images(2, INPUT_SIZE, seed=0)
    assert float(traced_like.mean()) > 0  # export traces these (seed 0)
    with pytest.raises(ExportCheckError, match="drivable.logits: max \\|ONNX Runtime - PyTorch\\|"):
        export_camera_model(_BranchOnImage(), INPUT_SIZE, path, batch=2, check_images=-traced_like.abs() - 1.0)
    with open(tmp_path / "branch.json") as f:
        assert json.load(f)["checks"]["passed"] is False  # the evidence is kept
    differences = output_differences({"a": np.ones(3)}, {"a": np.ones(3) + 0.5})
    assert parity_problems(differences, atol=1e-3, rtol=1e-3) and not parity_problems(differences, atol=1.0, rtol=0)


def test_query_outputs_compare_as_sets():
    """A top-k near-tie reorders queries (the same result) or swaps the k-th token (one query differs)."""
    rng = np.random.default_rng(0)
    reference = {"h.logits": rng.normal(size=(2, 20, 3)), "h.boxes": rng.uniform(size=(2, 20, 4))}
    order = rng.permutation(20)
    reordered = {k: v[:, order] + 1e-6 for k, v in reference.items()}
    agreement = query_set_agreement(reference, reordered, ["h.logits", "h.boxes"], atol=1e-3, rtol=1e-3)
    assert agreement == {"queries": 40, "matched": 40, "worst_scaled": pytest.approx(agreement["worst_scaled"])}
    assert agreement["worst_scaled"] < 0.01
    swapped = {k: v.copy() for k, v in reordered.items()}
    swapped["h.boxes"][1, 5] += 0.2  # one query of image 1 came from another token
    assert query_set_agreement(reference, swapped, ["h.logits", "h.boxes"], 1e-3, 1e-3)["matched"] == 39


@pytest.mark.extended  # 22 s: the export and its checks are in make test (test_fixed_batch_export_*); this is the tool
def test_export_tool_writes_a_checked_model_from_a_folder_of_images(small_dataset, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    front = os.path.join(small_dataset, "samples", "CAM_FRONT")
    for name in sorted(os.listdir(front))[:2]:
        cv2.imwrite(str(folder / name), cv2.imread(os.path.join(front, name)))
    out = str(tmp_path / "demo.onnx")
    result = subprocess.run([sys.executable, "tools/export_onnx.py", "configs/demo_synthetic.py", "none", "--out", out,
                             "--batch", "1", "--images", str(folder), "--int8", "--calib-images", str(folder)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "every deployment check passed" in result.stdout
    with open(tmp_path / "demo.json") as f:
        sidecar = json.load(f)
    assert sidecar["checks"]["parity"]["inputs"] == f"images of {folder}" and sidecar["checks"]["fp16"]["inputs"] == 2
    # --int8: the Q/DQ copy beside it, its sidecar naming the calibration set, the structural checks passed
    with open(tmp_path / "demo.int8.json") as f:
        int8 = json.load(f)
    assert int8["int8"]["calibration"] == {"method": "percentile", "images": 2, "source": str(folder)}
    assert int8["int8"]["quantize_nodes"] > 50 and not int8["checks"]["int8_problems"]
    assert int8["fp32_model"] == "demo.onnx" and "structural checks passed" in result.stdout
    # The fp32 graph writes window attention per head; the Q/DQ copy is quantized from timm's batched layout (its
    # q/k/v split is the one 5-D Transpose in the graph), and the batched twin it came from is gone.
    def five_d_transposes(path):
        model = onnx.shape_inference.infer_shapes(onnx.load(path))
        ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in model.graph.value_info}
        return sum(n.op_type == "Transpose" and ranks.get(n.output[0]) == 5 for n in model.graph.node)

    assert int8["int8"]["window_attention"] == "batched"
    assert five_d_transposes(out) == 0 and five_d_transposes(str(tmp_path / "demo.int8.onnx")) > 0
    assert sorted(os.listdir(tmp_path)) == ["demo.int8.json", "demo.int8.onnx", "demo.json", "demo.onnx", "images"]


def test_export_tool_names_a_missing_image_folder(tmp_path, capsys):
    from perception.commands import export_onnx

    args = export_onnx.get_args_parser().parse_args([os.path.join(REPO, "configs", "demo_synthetic.py"), "none",
                                                     "--out", str(tmp_path / "x.onnx"), "--images",
                                                     str(tmp_path / "missing")])
    assert export_onnx.main(args) == 2
    assert f"image folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err


def test_deployment_config_costs_no_more_than_yolop():
    """configs/swin_deploy_nuscenes_bdd100k.py: all four heads at 384x640 within YOLOP's 18.5 GFLOPs (2 x MAC)."""
    from torch.utils.flop_counter import FlopCounterMode

    from perception.config import load_config

    cfg = parse_config(load_config(os.path.join(REPO, "configs", "swin_deploy_nuscenes_bdd100k.py")))
    assert tuple(cfg.input_size) == (384, 640)
    model = build_model(cfg.model, tuple(cfg.input_size)).eval()
    assert set(model.heads) == {"drivable", "obstacles", "lanes", "lights"}
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, 3, 384, 640))
    gflops = counter.get_total_flops() / 1e9
    assert 10.0 < gflops <= 18.5, gflops
