#!/usr/bin/env python
"""The same as `perception make-synthetic nuscenes`: see perception/commands/make_synthetic_nuscenes.py, or --help."""

import sys

from perception.commands import make_synthetic_nuscenes, run_command

if __name__ == "__main__":
    sys.exit(run_command(make_synthetic_nuscenes))
