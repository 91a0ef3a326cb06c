"""The real `ultra-console` on a pty: its first frame is already full (plan panels and the footer's
keys together), and the views mounted just after it answer at once when asked for early."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
import time

import pytest
from test_app_watchdog import _read_until
from test_app_watchdog import _spawn as _spawn_80x24

# What the first frame holds depends on the preview helper answering in time: measured alone, not beside
# the parallel pass.
pytestmark = pytest.mark.serial


def _spawn(tmp_path):
    """The app on a 160x40 pty (at 80x24 the footer has no room left for the palette key)."""
    proc, master = _spawn_80x24(tmp_path)
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # before Python is even up
    return proc, master


def _close(proc, master: int) -> None:
    """SIGTERM ends the app through Textual's exit, which writes the terminal's restore sequences: read the
    pty meanwhile, as a terminal does (an unread pty would block that last write)."""
    if proc.poll() is None:
        proc.terminate()
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    break
        proc.wait(timeout=5)
    os.close(master)


def test_first_frame_is_full_and_the_views_after_it_answer_at_once(tmp_path):
    """One start-up serves both checks (each costs a whole app start in the serial tier): what the first
    frame holds is read from the bytes up to the palette key, then the views are asked for straight away."""
    proc, master = _spawn(tmp_path)
    try:
        seen = _read_until(master, b"Commands")
        assert b"Commands" in seen, "the footer's palette key was never drawn"
        # Everything written up to the palette key: the plan's panels and its own footer keys are in it.
        # Computed ones too (the preview helper's plan): the status, the findings and the command.
        for text in (
            b"Preflight",
            b"Findings",
            b"Launch",
            b"Plan",
            b"Ready to launch",
            b"no findings",
            b"ray job submit",
        ):
            assert text in seen, f"{text!r} missing from the first frame"
        os.write(master, b"4")  # straight after the first frame: the events view may still be mounting
        assert b"no alerts" in _read_until(master, b"no alerts"), "the events view never showed"
        os.write(master, b"2")
        assert b"throughput" in _read_until(master, b"throughput"), "the run view never showed"
    finally:
        _close(proc, master)
