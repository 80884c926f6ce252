#!/usr/bin/env python
"""The same as `perception demo`: see perception/commands/demo.py, or --help."""

import sys

from perception.commands.demo import get_args_parser, main, run  # noqa: F401  (get_args_parser, main: for scripts)

if __name__ == "__main__":
    sys.exit(run())
