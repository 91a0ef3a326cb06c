"""End to end: the real `ultra-console demo` binary in tmux, driven by keys, read by capture-pane.

Plan edit -> launch (through the confirm modal) -> metrics appear -> log search -> abort (graceful)
-> STOPPED -> quit tears the demo cluster down. Polls the screen for text; no fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import until

pytestmark = [pytest.mark.tmux, pytest.mark.ray, pytest.mark.serial]

BIN = Path(sys.executable).with_name("ultra-console")
SESSION = f"uc-e2e-{os.getpid()}"
TMUX = ["tmux", "-L", SESSION]  # a tmux server of this test's own: no other session sees its keys or options


def _tmux(*args: str) -> str:
    return subprocess.run([*TMUX, *args], check=True, capture_output=True, text=True).stdout


def _screen() -> str:
    return _tmux("capture-pane", "-t", SESSION, "-p")


def _wait(pattern: str, timeout: float = 90.0) -> re.Match[str]:
    rx = re.compile(pattern)
    last = [""]

    def shown() -> re.Match[str] | None:
        last[0] = _screen()
        return rx.search(last[0])

    return asyncio.run(
        until(None, shown, lambda: f"{pattern!r}; screen was:\n{last[0]}", timeout, interval=0.2)
    )


def _keys(*keys: str) -> None:
    for key in keys:
        _tmux("send-keys", "-t", SESSION, key)
        # Key pacing, never used to wait for a result: a human-ish gap so no key is lost, and more than
        # Textual's 100 ms ESCDELAY after Escape so the next key is not read as Alt+key.
        time.sleep(0.3 if key == "Escape" else 0.05)


def _press_until(key: str, pattern: str, timeout: float = 60.0) -> None:
    """Press `key` until `pattern` shows (a key pressed while a modal closes is refused by the app)."""
    deadline = time.monotonic() + timeout
    while True:
        _keys(key)
        try:
            _wait(pattern, 2.0)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


@pytest.fixture
def demo_session(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    env = f"TERM=xterm-256color COLORTERM=truecolor XDG_STATE_HOME={tmp_path} XDG_CONFIG_HOME={tmp_path}"
    cmd = (
        f"env -u COLUMNS -u LINES {env} {BIN} demo --nodes 2 --rollouts 200 --step-seconds 0.5 --no-launch; "
        "echo DEMO-EXITED $?; sleep 600"
    )
    _tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", cmd)
    _tmux("set-option", "-t", SESSION, "-s", "escape-time", "10")
    _tmux("resize-window", "-t", SESSION, "-x", "120", "-y", "40")
    try:
        yield
    finally:
        subprocess.run([*TMUX, "send-keys", "-t", SESSION, "q"], check=False)
        with contextlib.suppress(AssertionError):  # cleanup: the session goes in any case
            _wait("DEMO-EXITED", 60)
        subprocess.run([*TMUX, "kill-session", "-t", SESSION], check=False)


def test_demo_plan_launch_metrics_search_abort(demo_session):
    _wait(r"DEMO .*1 Plan", 180)
    _wait(r"Ready to launch")
    # plan edit: Down moves through the form (variant, nodes, ... rollouts is the 17th stop)
    _keys(*["Down"] * 17, "End", "C-u")
    _wait(r"Rollouts\s+enter a value")
    _keys("9", "0", "0")  # long enough that the run is still going when we abort it
    _wait(r"Rollouts\s+900\b")
    _keys("L")  # straight from the field being edited: a binding's key commits the edit, then launches
    _wait(r"Launch this run\?")
    _keys("Right", "Enter")  # Cancel has focus: move to Launch on purpose
    _press_until("2", r"job ultra-console-\S+  (PENDING|RUNNING)", 60)
    _wait(r"RUNNING .*rollout ([3-9]|\d\d+)/900", 120)  # metrics arrived (and `step 2` is in the log)
    _wait(r"raw reward")
    _keys("3")
    _wait(r"line \d+/\d+ │ FOLLOW")
    _keys("/")
    _wait(r"search text \(re:PATTERN")  # the prompt is up and focused
    _keys("s", "t", "e", "p", " ", "2", ":", "Enter")
    _wait(r"/step 2: 1/\d+")
    _keys("2")
    _press_until("A", r"Abort run ultra-console-", 20)
    _keys("Right", "Enter")  # graceful stop (Cancel had focus)
    _wait(r"is STOPPED", 120)
    _keys("Enter")
    _wait(r"ultra-console-\S+ STOPPED")
    # The modal is gone once the footer offers the view keys again (a modal screen takes every key that is
    # not its own: a `q` sent while Close was still being handled was swallowed, once in CI).
    _wait(r"1 Plan\s+2 Run\s+3 Logs\s+4 Events\s+\? Help\s+q Quit")
    _keys("q")
    _wait(r"tearing down the local cluster", 30)
    _wait(r"DEMO-EXITED 0", 60)
