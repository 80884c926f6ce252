#!/usr/bin/env python
"""The same as `perception make-synthetic bdd100k`: see perception/commands/make_synthetic_bdd100k.py, or --help."""

import sys

from perception.commands.make_synthetic_bdd100k import get_args_parser, main, run  # noqa: F401  (get_args_parser, main: for scripts)

if __name__ == "__main__":
    sys.exit(run())
