#!/usr/bin/env python
"""The same as `perception build-label-cache`: see perception/commands/build_label_cache.py, or --help."""

import sys

from perception.commands.build_label_cache import get_args_parser, main, run  # noqa: F401  (get_args_parser, main: for scripts)

if __name__ == "__main__":
    sys.exit(run())
