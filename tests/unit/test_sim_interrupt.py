"""The simulated trainer's SIGINT watch (backend.demo.simtrainer.interrupt): the clean-shutdown line is said
the moment SIGINT arrives, once, and the process is gone within the grace even when its main thread never
raises KeyboardInterrupt (as a driver stuck in `ray.get` on a loaded runner did, until Ray's SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import signal, sys, time
from backend.demo.simtrainer.interrupt import InterruptWatch, Once
said = Once(lambda: print("shutting down cleanly", flush=True))
finish = Once(lambda: print("finish_tracking: done", flush=True))
watch = InterruptWatch(said, finish, grace_s=1.0)
print("watching" if watch.start() else "not watching", flush=True)
if sys.argv[1] == "stuck":
    signal.signal(signal.SIGINT, lambda *_: None)  # the main thread never raises KeyboardInterrupt
try:
    time.sleep(30)
except KeyboardInterrupt:
    said()
finish()
watch.ended()
"""


def _interrupted(mode: str) -> tuple[int, list[str], float]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "watching"
    t0 = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=20)
    return child.returncode, out.splitlines(), time.monotonic() - t0


def test_a_main_thread_that_never_raises_is_ended_within_the_grace() -> None:
    code, lines, took = _interrupted("stuck")
    assert code == 130 and took < 10
    assert lines == ["shutting down cleanly", "finish_tracking: done"]


def test_a_main_thread_that_raises_says_the_line_once_and_ends_itself() -> None:
    code, lines, _ = _interrupted("plain")
    assert code == 0  # the main thread's own way out, not the watcher's exit
    assert lines == ["shutting down cleanly", "finish_tracking: done"]
