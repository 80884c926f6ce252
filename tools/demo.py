#!/usr/bin/env python
"""The same as `perception demo`: see perception/commands/demo.py, or --help."""

import sys

from perception.commands import demo, run_command

if __name__ == "__main__":
    sys.exit(run_command(demo))
