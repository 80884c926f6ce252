#!/usr/bin/env python
"""The same as `perception make-synthetic nuscenes`: see perception/commands/make_synthetic_nuscenes.py, or --help."""

import sys

from perception.commands.make_synthetic_nuscenes import get_args_parser, main, run  # noqa: F401  (get_args_parser, main: for scripts)

if __name__ == "__main__":
    sys.exit(run())
