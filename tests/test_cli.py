"""The `perception` console command (pyproject [project.scripts]) dispatches to the same main() as tools/*.py."""

from __future__ import annotations

import os
import subprocess
import sys

from perception import cli

BIN = os.path.join(os.path.dirname(sys.executable), "perception")


def test_installed_command_lists_every_subcommand_with_one_line():
    result = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for name in ("train", "test", "export", "demo", "make-synthetic", "build-label-cache"):
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split()) > 3  # a name and its one-line description


def test_subcommand_help_is_the_tools_help(capsys):
    for argv, option in ((["test", "--help"], "--report"), (["export", "--help"], "--out"),
                         (["make-synthetic", "bdd100k", "--help"], "--videos"),
                         (["make-synthetic", "nuscenes", "--help"], "--scenes")):
        try:
            cli.main(argv)
        except SystemExit as exit_:  # argparse exits after printing help
            assert exit_.code == 0
        printed = capsys.readouterr().out
        assert printed.startswith(f"usage: perception {' '.join(argv[:-1])}") and option in printed


def test_unknown_command_and_missing_format_are_clear_errors(capsys):
    assert cli.main(["tarin"]) == 2
    assert "unknown command 'tarin'" in capsys.readouterr().err
    assert cli.main(["make-synthetic", "/tmp/out"]) == 2
    assert "name the format first" in capsys.readouterr().err


def test_a_subcommand_runs_the_tool(tmp_path):
    """perception make-synthetic bdd100k writes the same dataset as tools/make_synthetic_bdd100k.py."""
    out = str(tmp_path / "bdd")
    result = subprocess.run([BIN, "make-synthetic", "bdd100k", out, "--videos", "2", "--frames-per-video", "2",
                             "--val-videos", "1", "--image-size", "320x180"], capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, PERCEPTION_PROGRESS="0"))
    assert result.returncode == 0, result.stderr
    assert os.path.isfile(os.path.join(out, "labels", "det_20", "det_train.json"))
