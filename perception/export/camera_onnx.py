"""Export the camera network (backbone, neck, every head) to TensorRT-ready ONNX and prove it is the same model.

Export -> simplify (onnxsim folds every shape computation of a fixed-shape graph into
constants) -> structural checks -> ONNX Runtime vs PyTorch on a second input -> FP16 risk
report -> metadata + sidecar. The graph holds no camera geometry and no post-processing: its
outputs are the raw tensors of ``PerceptionModel.forward`` in eval mode.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

from perception.data.camera_dataset import normalize_image
from perception.export.camera_sidecar import INPUT_NAME, PREPROCESSING, build_sidecar
from perception.export.graph_checks import (
    ExportCheckError,
    check_structure,
    fp16_risk_report,
    output_differences,
    parity_problems,
    query_set_agreement,
)
from perception.export.provenance import provenance, set_metadata
from perception.tasks import CAMERA_TASKS

# ONNX Runtime vs PyTorch (both fp32, CPU): a difference above atol + rtol * max|output| fails.
PARITY_ATOL = 1e-3
PARITY_RTOL = 1e-3
# Share of a head's queries that must have a counterpart within tolerance (a top-k near-tie may swap the
# k-th token for another: one query of 100 per image).
MIN_QUERY_AGREEMENT = 0.95


class CameraGraph(nn.Module):
    """forward(images) -> the model's outputs as a tuple in ``output_names`` order (ONNX needs a fixed order)."""

    def __init__(self, model: nn.Module, output_names: list[str]):
        super().__init__()
        self.model = model
        self.output_names = list(output_names)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.model(images)
        return tuple(outputs[name] for name in self.output_names)


def synthetic_camera_images(batch: int, input_size: tuple[int, int], seed: int) -> torch.Tensor:
    """Normalised [batch,3,H,W] road-like images (sky, road, boxes) for tracing when no real images are given."""
    rng = np.random.default_rng(seed)
    height, width = input_size
    images = np.empty((batch, height, width, 3), np.float32)  # RGB 0-255, made 8-bit like a camera's below
    for image in images:
        horizon = int(height * rng.uniform(0.3, 0.5))
        image[:horizon] = rng.uniform(120, 220, 3)
        image[horizon:] = rng.uniform(60, 120)
        for _ in range(rng.integers(2, 8)):
            x, y = int(rng.integers(0, width - 8)), int(rng.integers(horizon // 2, height - 8))
            w, h = int(rng.integers(8, max(9, width // 4))), int(rng.integers(8, max(9, height // 4)))
            image[y:y + h, x:x + w] = rng.uniform(0, 255, 3)
        image += rng.normal(0, 8, image.shape)
    return torch.stack([normalize_image(image) for image in np.clip(images, 0, 255).round().astype(np.uint8)])


def _batches(images: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """Split [N,...] into [batch,...] chunks, cycling images to fill the last one."""
    count = max(batch, int(np.ceil(len(images) / batch)) * batch)
    indices = torch.arange(count) % len(images)
    return list(images[indices].split(batch))


def inference_copy(model: nn.Module) -> nn.Module:
    """A deep copy in eval mode with training-only modules (timm DropPath, Dropout) replaced by Identity.

    They are the identity in eval mode, yet timm's DropPath traced into a graph that differed
    from PyTorch by up to 2e-3 after one Swin stage (drop_path_rate 0.1, ONNX Runtime 1.32);
    removing them makes the graph match to 1e-6.
    """
    copied = copy.deepcopy(model).eval()
    for module in list(copied.modules()):
        for name, child in module.named_children():
            if type(child).__name__ == "DropPath" or isinstance(child, nn.Dropout):
                setattr(module, name, nn.Identity())
    return copied


@contextlib.contextmanager
def _quiet_native_output():
    """Silence onnxsim's C++ "failed to run op" chatter (it skips folding those nodes; the checks judge the result)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as devnull:
        try:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _simplify(raw_path: str, path: str) -> None:
    import onnx
    import onnxsim

    with _quiet_native_output():
        simplified, ok = onnxsim.simplify(onnx.load(raw_path), check_n=0)  # our own parity check follows
    if not ok:
        raise ExportCheckError(f"onnxsim could not simplify {raw_path}")
    onnx.save(simplified, path)


def _declare_output_shapes(onnx_model, shapes: dict[str, list[int]]) -> None:
    """Set every graph output's shape to ["batch", *shapes[name]]."""
    for output in onnx_model.graph.output:
        dims = output.type.tensor_type.shape.dim
        del dims[:]
        dims.add().dim_param = "batch"
        for size in shapes[output.name]:
            dims.add().dim_value = int(size)


def _parity(graph: CameraGraph, path: str, images: torch.Tensor, tasks: tuple) -> tuple[dict, list[str]]:
    """ONNX Runtime vs PyTorch on ``images``: (report, problems). Query heads fall back to a set comparison."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = graph.output_names
    with torch.no_grad():
        reference = {n: t.numpy() for n, t in zip(names, graph(images))}
    actual = dict(zip(names, session.run(names, {INPUT_NAME: images.numpy()})))
    differences = output_differences(reference, actual)
    dense = dict(differences)
    query_sets, query_failures = {}, []
    for head in (task.name for task in tasks if task.query_outputs):  # per query [B,Q,...]: may match as sets
        head_differences = {n: dense.pop(n) for n in names if n.startswith(f"{head}.")}
        if not parity_problems(head_differences, PARITY_ATOL, PARITY_RTOL):
            continue
        agreement = query_set_agreement(reference, actual, list(head_differences), PARITY_ATOL, PARITY_RTOL)
        query_sets[head] = agreement
        if agreement["matched"] < MIN_QUERY_AGREEMENT * agreement["queries"]:
            query_failures.append(f"{head}: only {agreement['matched']} of {agreement['queries']} queries have an "
                                  "ONNX Runtime counterpart within tolerance (matched as a set; needed "
                                  f"{MIN_QUERY_AGREEMENT:.0%})")
    failures = parity_problems(dense, PARITY_ATOL, PARITY_RTOL) + query_failures
    report = {"batch": int(images.shape[0]), "atol": PARITY_ATOL, "rtol": PARITY_RTOL, "outputs": differences,
              "query_sets": query_sets}
    return report, failures


def export_camera_model(model: nn.Module, input_size: tuple[int, int], path: str, batch: int | None = 6,
                        opset: int = 17, config_text: str = "", postprocess: dict | None = None,
                        check_images: torch.Tensor | None = None, check_images_source: str = "validation images",
                        fp16_images: int = 6, tasks: tuple = CAMERA_TASKS) -> dict:
    """Write ``path`` and ``<path stem>.json``; return the sidecar. ``batch=None``: dynamic batch axis.
    ``tasks``: the specs of the model's heads (the sidecar's meanings; which outputs are per query).

    ``check_images`` [N,3,H,W] (normalised, e.g. from the validation split) drive the parity
    check and the FP16 report; without them, synthetic road-like images are used (and the
    sidecar says so). Raises ExportCheckError (after writing both files, the sidecar listing
    every problem) when a check fails.
    """
    import onnx

    model = inference_copy(model)
    input_size = tuple(int(s) for s in input_size)
    trace_batch = batch or 2
    example = synthetic_camera_images(trace_batch, input_size, seed=0)
    with torch.no_grad():
        output_shapes = {name: list(t.shape[1:]) for name, t in model(example[:1]).items()}
    output_names = list(output_shapes)
    graph = CameraGraph(model, output_names)
    dynamic_axes = {name: {0: "batch"} for name in [INPUT_NAME, *output_names]} if batch is None else None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    raw_path = os.path.splitext(path)[0] + ".raw.onnx"
    timings = {}
    start = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # sizes fixed by the input size become constants
        torch.onnx.export(graph, (example,), raw_path, input_names=[INPUT_NAME], output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)
    timings["export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    try:
        _simplify(raw_path, path)
    finally:
        os.remove(raw_path)
    timings["simplify_s"] = time.perf_counter() - start

    start = time.perf_counter()
    onnx_model = onnx.load(path)
    if batch is None:  # shape inference loses the query axis behind the run-time batch size; declare it
        _declare_output_shapes(onnx_model, output_shapes)
        onnx.save(onnx_model, path)
    structure = check_structure(onnx_model, dynamic_batch=batch is None)
    problems = list(structure["problems"])

    # Parity on inputs the graph was not traced with (and another batch size when it is dynamic).
    source = check_images_source if check_images is not None else "synthetic road-like images (seed 1)"
    if check_images is None:
        check_images = synthetic_camera_images(max(batch or 3, fp16_images), input_size, seed=1)
    parity, parity_failures = _parity(graph, path, _batches(check_images, batch or 3)[0], tasks)
    problems += parity_failures
    timings["parity_s"] = time.perf_counter() - start

    start = time.perf_counter()
    fp16_batches = _batches(check_images[:fp16_images], batch or 1)
    fp16 = fp16_risk_report(path, [{INPUT_NAME: b.numpy()} for b in fp16_batches])
    if fp16["non_finite"]:
        problems.append(f"inf/NaN activations in fp32 already: {fp16['non_finite'][:5]}")
    timings["fp16_report_s"] = time.perf_counter() - start

    output_shapes = {name: [batch or "batch", *shape] for name, shape in output_shapes.items()}
    input_shape = [batch or "batch", 3, *input_size]
    checks = {
        "passed": not problems,
        "problems": problems,
        "structure": {k: v for k, v in structure.items() if k != "problems"},
        "parity": {"inputs": source, **parity},
        "fp16": fp16 | {"inputs_source": source},
        "timings_s": timings,
    }
    origin = provenance(config_text)
    sidecar = build_sidecar(input_shape, output_shapes, postprocess or {}, opset, origin, checks, tasks)
    set_metadata(onnx_model, {
        **origin, "input_name": INPUT_NAME, "input_shape": json.dumps(input_shape),
        "colour_order": PREPROCESSING["colour_order"], "mean": json.dumps(PREPROCESSING["mean"]),
        "std": json.dumps(PREPROCESSING["std"]), "class_names": json.dumps(sidecar["class_names"]),
        "outputs": json.dumps(output_names), "checks_passed": str(not problems),
    })
    onnx.save(onnx_model, path)
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(sidecar, f, indent=1)
    if problems:
        raise ExportCheckError(f"{path} failed {len(problems)} deployment check(s) (details in the sidecar):\n  "
                               + "\n  ".join(problems))
    return sidecar
