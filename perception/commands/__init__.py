"""The tools' code: ``tools/<name>.py`` and ``perception <name>`` (perception/cli.py) both run these.

Each module has ``get_args_parser()`` and ``main(args) -> exit status`` (``ENTRY_POINT`` when the
process needs more around ``main``, e.g. torchrun's clean exit in ``test``).
"""

from __future__ import annotations

import argparse
from types import ModuleType


def run_command(module: ModuleType, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv`` (default: the command line) with the module's parser and run it; the exit status."""
    parser = module.get_args_parser()
    if prog:
        parser.prog = prog
    entry = getattr(module, "ENTRY_POINT", module.main)
    return entry(parser.parse_args(argv))


def image_size(text: str) -> tuple[int, int]:
    """argparse type: "640x360" -> (640, 360); anything else is argparse's usage error (exit 2) naming the value."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like 640x360 (WIDTHxHEIGHT), got {text!r}") from None
    return width, height
