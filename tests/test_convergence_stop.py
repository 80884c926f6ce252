"""Stopping bench/convergence.py stops the training it runs (run_training): a training left behind kept writing
into the variant's work dir beside the next run of it."""

import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stand-in for the bench's main: its SIGTERM handler, run_training on a child that writes its pid and sleeps.
BENCH = """
import sys
sys.path.insert(0, {bench!r})
from convergence import exit_on_sigterm, run_training
exit_on_sigterm()
child = [sys.executable, "-c", "import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
with open({log!r}, "w") as log:
    run_training(child, log)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stopping_the_bench_stops_its_training(tmp_path):
    pid_file = tmp_path / "training.pid"
    script = BENCH.format(bench=os.path.join(ROOT, "bench"), pid_file=str(pid_file), log=str(tmp_path / "log"))
    bench = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    training = int(pid_file.read_text())
    assert _alive(training)
    bench.send_signal(signal.SIGTERM)
    assert bench.wait(timeout=30) == 143
    deadline = time.time() + 10
    while _alive(training) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(training), "the training outlived the bench that started it"
