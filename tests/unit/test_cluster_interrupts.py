"""The local Ray cluster's processes meet SIGINT as a terminal leaves it (backend.demo.local_cluster
`default_interrupts`), even when the suite runs as a background job that inherited SIGINT ignored: a job
stopped with RAY_JOB_STOP_SIGNAL=SIGINT otherwise never sees its signal (its driver's Python keeps the
inherited ignore), and the SIGINT-stop tests failed on CI so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what a driver started by this process (or by its raylets) finds SIGINT set to
CHILD = """
import subprocess, sys
if sys.argv[1] == "reset":
    from backend.demo.local_cluster import default_interrupts
    default_interrupts()
probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip())
"""


def _driver_sees(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # a shell's `cmd &`
    )
    return out.stdout.strip()


def test_a_cluster_started_with_sigint_ignored_hands_its_drivers_the_default() -> None:
    assert _driver_sees("inherit") == "False"  # the trap: an ignored SIGINT is inherited by every driver
    assert _driver_sees("reset") == "True"
