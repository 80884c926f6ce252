#!/usr/bin/env python
"""The same as `perception make-synthetic bdd100k`: see perception/commands/make_synthetic_bdd100k.py, or --help."""

import sys

from perception.commands import make_synthetic_bdd100k, run_command

if __name__ == "__main__":
    sys.exit(run_command(make_synthetic_bdd100k))
