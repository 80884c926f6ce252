#!/usr/bin/env python
"""The same as `perception test`: see perception/commands/test.py, or --help."""

import sys

from perception.commands.test import get_args_parser, main, run  # noqa: F401  (get_args_parser, main: for scripts)

if __name__ == "__main__":
    sys.exit(run())
