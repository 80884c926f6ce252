#!/usr/bin/env python
"""The same as `perception test`: see perception/commands/test.py, or --help."""

import sys

from perception.commands import run_command, test

if __name__ == "__main__":
    sys.exit(run_command(test))
