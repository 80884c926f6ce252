"""The package's layering (pyproject.toml, [tool.importlinter]) holds, and every part of it has a layer.

A module may import only from the layers below its own; ``|`` siblings not from each other. The
check is import-linter's, run as a user would run it (``lint-imports``).
"""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys

import pytest

import perception

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _layers() -> list[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        contracts = tomllib.load(handle)["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [name.strip() for layer in layers for name in layer.split("|")]


def test_import_layers_contract_is_kept():
    command = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert command, "lint-imports not found: `make install` installs import-linter (the dev extra)"
    result = subprocess.run([command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout, result.stdout[-2000:]


def test_every_top_level_part_of_the_package_has_a_layer():
    """A new subpackage or top-level module must be placed in a layer, or the contract says nothing about it."""
    parts = {f"perception.{m.name}" for m in pkgutil.iter_modules(perception.__path__)}
    assert parts - set(_layers()) == set(), "add these to [tool.importlinter] layers in pyproject.toml"
