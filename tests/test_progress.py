"""Progress bars only where a person watches: a terminal, not SLURM / CI / a log file."""

from __future__ import annotations

from perception.core import progress as progress_module
from perception.core.progress import interactive, progress


def test_quiet_under_slurm_ci_and_when_forced_off(monkeypatch):
    monkeypatch.delenv("PERCEPTION_PROGRESS", raising=False)
    monkeypatch.setattr(progress_module.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert interactive()
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    assert not interactive()
    items = [1, 2, 3]
    assert progress(items, "x") is items  # unchanged: no bar, no output
    monkeypatch.setenv("PERCEPTION_PROGRESS", "1")  # forced on, even under SLURM
    assert interactive()
    monkeypatch.setenv("PERCEPTION_PROGRESS", "0")
    monkeypatch.delenv("SLURM_JOB_ID")
    assert not interactive()


def test_a_bar_on_a_terminal_yields_every_item(monkeypatch, capsys):
    monkeypatch.setenv("PERCEPTION_PROGRESS", "1")
    assert list(progress(range(5), "counting", unit="n")) == [0, 1, 2, 3, 4]
    assert "counting" in capsys.readouterr().err
