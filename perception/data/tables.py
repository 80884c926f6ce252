"""Load nuScenes tables through the devkit, turning a missing or broken table into an error that
names the file (the devkit raises a bare assertion or a JSON traceback)."""

from __future__ import annotations

import json
import os

from perception.core.errors import PerceptionError

# The tables NuScenes() reads (v1.0); a dataset missing any of them cannot be loaded.
TABLES = ("category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
          "scene", "sample", "sample_data", "sample_annotation", "map")


class DatasetError(PerceptionError, RuntimeError):
    pass


def check_inside_root(relative_path: str, what: str) -> str:
    """``relative_path`` unchanged when it stays inside the data root; a DatasetError naming ``what``
    (the table / file and record) for an absolute path or one with ``..``: a dataset JSON must never
    make us read (or a label cache point) outside the data root."""
    parts = str(relative_path).replace("\\", "/").split("/")
    if os.path.isabs(relative_path) or str(relative_path).startswith(("/", "\\")) or ".." in parts:
        raise DatasetError(f"{what} is {relative_path!r}, which leaves the data root (absolute path or '..'); "
                           "dataset paths must be relative to data_root. Fix the record or the dataset's JSON.")
    return relative_path


def find_table_problem(data_root: str, version: str) -> str | None:
    """A sentence naming the first missing or unreadable table, or None."""
    directory = os.path.join(data_root, version)
    if not os.path.isdir(directory):
        return f"{directory} does not exist: check data_root and version"
    for table in TABLES:
        path = os.path.join(directory, f"{table}.json")
        if not os.path.isfile(path):
            return f"table {path} is missing: the dataset is incomplete (re-extract the {version} archive)"
        try:
            with open(path) as f:
                records = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return f"table {path} is not valid JSON ({error}): the file is truncated or corrupt; re-extract it"
        if not isinstance(records, list):
            return f"table {path} must hold a JSON list of records, found {type(records).__name__}"
    return None


def load_nuscenes(data_root: str, version: str):
    """``NuScenes(version, data_root)`` with errors that name the broken table."""
    from nuscenes.nuscenes import NuScenes

    data_root = os.path.abspath(data_root)
    if not os.path.isdir(os.path.join(data_root, version)):
        raise DatasetError(find_table_problem(data_root, version))
    try:
        return NuScenes(version=version, dataroot=data_root, verbose=False)
    except (AssertionError, FileNotFoundError, KeyError, TypeError, ValueError) as error:
        # Only on failure: reading every table again to name the broken one costs as much as loading.
        problem = find_table_problem(data_root, version) or (
            f"the devkit could not load {data_root}/{version}: {type(error).__name__}: {error} "
            "(a record references a token missing from its table?)")
        raise DatasetError(problem) from error
