#!/usr/bin/env python
"""The same as `perception train`: see perception/commands/train.py, or --help."""

import sys

from perception.commands import run_command, train

if __name__ == "__main__":
    sys.exit(run_command(train))
