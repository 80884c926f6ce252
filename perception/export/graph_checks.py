"""Checks an exported graph must pass before it goes near TensorRT (run at export and in tests).

- structure: ``onnx.checker`` full check; after simplification no Shape / Range / NonZero / If /
  Loop / Scan / ScatterND (a static-shape engine must not compute shapes or branch at run time);
  float32 inputs and outputs only (no INT64 I/O); static dimensions; every operator in
  TensorRT 8.6's ONNX parser list (``tensorrt_ops``); no inf / NaN in any constant (masks use a
  finite large negative so FP16 softmax rows never become NaN).
- parity: ONNX Runtime vs PyTorch on an input the graph was not traced with.
- FP16 risk: the largest |activation| of every node over real inputs (FP16 overflows at 65504;
  above 1e4 a node is flagged so the engine builder can keep it in FP32).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from perception.core.errors import PerceptionError
from perception.core.progress import progress
from perception.export.tensorrt_ops import TENSORRT_8_6_OPS

FORBIDDEN_OPS = frozenset({"Shape", "Range", "NonZero", "If", "Loop", "Scan", "ScatterND"})
# Ops allowed in a dynamic-batch graph only: they compute the batch size at run time.
DYNAMIC_BATCH_OPS = frozenset({"Shape", "Range"})
FP16_FLAG_ABS = 1e4
FP16_MAX = 65504.0
# Ops that only move or select values: their |max| is bounded by their input's, so the FP16 report skips them.
DATA_MOVEMENT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice",
                               "Gather", "GatherElements", "Expand", "Identity", "Pad", "TopK", "Cast"})


class ExportCheckError(PerceptionError, RuntimeError):
    """An exported graph failed a deployment check; the message lists every problem."""


def _dims(value_info) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in value_info.type.tensor_type.shape.dim]


def check_structure(model, dynamic_batch: bool = False) -> dict:
    """Report {"nodes", "ops", "problems"} of a loaded ONNX model; problems are human-readable strings."""
    import onnx
    from onnx import numpy_helper

    onnx.checker.check_model(model, full_check=True)
    ops = Counter(node.op_type for node in model.graph.node)
    problems = []
    forbidden = FORBIDDEN_OPS - DYNAMIC_BATCH_OPS if dynamic_batch else FORBIDDEN_OPS
    for op in sorted(set(ops) & forbidden):
        names = [n.name for n in model.graph.node if n.op_type == op][:3]
        problems.append(f"{ops[op]} {op} node(s) after simplification (e.g. {names}): shapes or control flow "
                        "computed at run time; export with a fixed batch (--batch N)")
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            problems.append(f"node {node.name} is a custom-domain op {node.domain}::{node.op_type} (needs a plugin)")
    for op in sorted(set(ops) - TENSORRT_8_6_OPS):
        problems.append(f"{ops[op]} {op} node(s): not in the TensorRT 8.6 ONNX parser's supported operators")
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            elem = value.type.tensor_type.elem_type
            if elem != onnx.TensorProto.FLOAT:
                problems.append(f"graph {kind} {value.name} has type {onnx.TensorProto.DataType.Name(elem)}, "
                                "expected FLOAT (TensorRT takes no INT64 I/O)")
            dims = _dims(value)
            free = [d for i, d in enumerate(dims) if not isinstance(d, int) or d <= 0]
            if free and not (dynamic_batch and len(free) == 1 and not isinstance(dims[0], int)):
                problems.append(f"graph {kind} {value.name} has non-static dimensions {dims}")
    constants = [(t.name, t) for t in model.graph.initializer]
    constants += [(n.name, a.t) for n in model.graph.node if n.op_type == "Constant" for a in n.attribute
                  if a.name == "value"]
    for name, tensor in constants:
        if tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE):
            array = numpy_helper.to_array(tensor)
            if not np.isfinite(array).all():
                problems.append(f"constant {name} holds inf or NaN (a -inf mask turns FP16 softmax into NaN; "
                                "use a finite large negative)")
    return {"nodes": len(model.graph.node), "ops": dict(sorted(ops.items())), "problems": problems}


def output_differences(reference: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per output: max |actual - reference| and max |reference| (the scale the difference is read against)."""
    report = {}
    for name, ref in reference.items():
        diff = np.abs(actual[name].astype(np.float64) - ref.astype(np.float64))
        report[name] = {"max_abs_diff": float(diff.max()), "max_abs_reference": float(np.abs(ref).max())}
    return report


def parity_problems(differences: dict[str, dict], atol: float, rtol: float) -> list[str]:
    """Outputs whose difference exceeds atol + rtol * max|reference|."""
    return [f"output {name}: max |ONNX Runtime - PyTorch| {d['max_abs_diff']:.3g} > {atol:g} + {rtol:g} x "
            f"{d['max_abs_reference']:.3g}" for name, d in differences.items()
            if d["max_abs_diff"] > atol + rtol * d["max_abs_reference"]]


def query_set_agreement(reference: dict[str, np.ndarray], actual: dict[str, np.ndarray], names: list[str],
                        atol: float, rtol: float) -> dict:
    """Match one head's queries between runtimes as a set, per image (Hungarian on the largest scaled difference).

    Query selection is a top-k over per-token scores: where two tokens' scores differ by less than
    the runtimes' rounding (common with untrained weights), the other runtime picks them in another
    order or, at the k-th place, another token. The decoder is permutation-equivariant, so a reorder
    is the same result; only queries without a counterpart within tolerance are a difference.
    Returns {"queries", "matched", "worst_scaled"} (scaled difference <= 1 is within tolerance).
    """
    from scipy.optimize import linear_sum_assignment

    batch, queries = reference[names[0]].shape[:2]
    matched, worst = 0, 0.0
    for b in range(batch):
        scaled = []
        for name in names:
            ref = reference[name][b].reshape(queries, -1).astype(np.float64)
            got = actual[name][b].reshape(queries, -1).astype(np.float64)
            tolerance = atol + rtol * float(np.abs(reference[name]).max())
            scaled.append(np.abs(ref[:, None, :] - got[None, :, :]).max(-1) / tolerance)  # (Q, Q)
        cost = np.max(scaled, axis=0)
        rows, cols = linear_sum_assignment(cost)
        pair_cost = cost[rows, cols]
        matched += int((pair_cost <= 1.0).sum())
        worst = max(worst, float(pair_cost.max()))
    return {"queries": batch * queries, "matched": matched, "worst_scaled": worst}


def fp16_risk_report(path: str, feeds: list[dict[str, np.ndarray]], flag_abs: float = FP16_FLAG_ABS,
                     chunk_bytes: float = 1.0e9, top: int = 10) -> dict:
    """Largest |activation| of every float node output over ``feeds`` (ONNX Runtime, fp32).

    The intermediate tensors are exposed as graph outputs a chunk at a time (bounded memory).
    Returns {"max_abs", "flag_abs", "flagged": [{tensor, node, op, max_abs}], "largest": top
    entries, "non_finite": tensors with inf/NaN, "nodes_checked", "inputs"}.
    """
    import onnx
    import onnxruntime as ort

    model = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(model)
    producer = {out: node for node in model.graph.node for out in node.output}
    infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    candidates = []  # (name, bytes)
    for name, node in producer.items():
        info = infos.get(name)
        skipped = node.op_type == "Constant" or node.op_type in DATA_MOVEMENT_OPS
        if skipped or info is None or info.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            continue
        dims = _dims(info)
        size = int(np.prod([d if isinstance(d, int) and d > 0 else 1 for d in dims])) * 4
        candidates.append((name, size))
    chunks, current, current_bytes = [], [], 0.0
    for name, size in candidates:
        if current and current_bytes + size > chunk_bytes:
            chunks.append(current)
            current, current_bytes = [], 0.0
        current.append(name)
        current_bytes += size
    if current:
        chunks.append(current)

    largest: dict[str, float] = {}
    non_finite: set[str] = set()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # every node as exported
    options.enable_cpu_mem_arena = False  # the arena would keep every chunk's peak
    for chunk in progress(chunks, "FP16 range report", unit="chunk"):
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        del probe.graph.output[:]
        probe.graph.output.extend([infos[name] for name in chunk])
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for feed in feeds:
            for name, value in zip(chunk, session.run(chunk, feed)):
                finite = np.isfinite(value)
                if not finite.all():
                    non_finite.add(name)
                magnitude = float(np.abs(value[finite]).max()) if finite.any() else 0.0
                largest[name] = max(largest.get(name, 0.0), magnitude)
        del session

    def entry(name: str) -> dict:
        node = producer[name]
        return {"tensor": name, "node": node.name, "op": node.op_type, "max_abs": largest[name]}

    ranked = sorted(largest, key=largest.get, reverse=True)
    return {
        "max_abs": largest[ranked[0]] if ranked else 0.0,
        "flag_abs": flag_abs,
        "flagged": [entry(n) for n in ranked if largest[n] > flag_abs],
        "largest": [entry(n) for n in ranked[:top]],
        "non_finite": sorted(non_finite),
        "nodes_checked": len(largest),
        "inputs": sum(int(next(iter(f.values())).shape[0]) for f in feeds),
    }
