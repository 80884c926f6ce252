#!/usr/bin/env python
"""The same as `perception build-label-cache`: see perception/commands/build_label_cache.py, or --help."""

import sys

from perception.commands import build_label_cache, run_command

if __name__ == "__main__":
    sys.exit(run_command(build_label_cache))
