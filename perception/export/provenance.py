"""Where an exported model came from: package version, git commit, config hash (sidecar + ONNX metadata)."""

from __future__ import annotations

import hashlib
import os
import subprocess

import perception


def git_commit() -> str:
    """HEAD of the checkout the package runs from, or "unknown" (an installed wheel has none)."""
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(config_text: str) -> dict:
    return {
        "package_version": perception.__version__,
        "git_commit": git_commit(),
        "config_sha256": hashlib.sha256(config_text.encode()).hexdigest() if config_text else None,
    }


def set_metadata(onnx_model, entries: dict) -> None:
    """Write ``entries`` (str() of each value) into the model's metadata_props, replacing same keys."""
    kept = [(p.key, p.value) for p in onnx_model.metadata_props if p.key not in entries]
    del onnx_model.metadata_props[:]
    for key, value in kept + [(k, str(v)) for k, v in entries.items()]:
        prop = onnx_model.metadata_props.add()
        prop.key, prop.value = key, value
