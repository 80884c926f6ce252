#!/usr/bin/env python
"""The same as `perception export`: see perception/commands/export_onnx.py, or --help."""

import sys

from perception.commands import export_onnx, run_command

if __name__ == "__main__":
    sys.exit(run_command(export_onnx))
