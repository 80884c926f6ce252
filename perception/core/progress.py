"""Progress bars for long steps, only where a person watches.

A bar (tqdm, on stderr) when stderr is a terminal; nothing under SLURM (``SLURM_JOB_ID``), in CI or
when output goes to a file or pipe, where redrawn bars fill logs with carriage returns.
``PERCEPTION_PROGRESS=1`` / ``=0`` forces them on / off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable


def interactive() -> bool:
    forced = os.environ.get("PERCEPTION_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    if os.environ.get("SLURM_JOB_ID") or os.environ.get("CI"):
        return False
    return sys.stderr.isatty()


def progress(iterable: Iterable, description: str, total: int | None = None, unit: str = "it") -> Iterable:
    """``iterable`` wrapped in a progress bar when ``interactive()``, else unchanged."""
    if not interactive():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=description, total=total, unit=unit, leave=False, dynamic_ncols=True, file=sys.stderr)
