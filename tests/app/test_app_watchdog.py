"""The console exits cleanly when its terminal goes away (SSH drop), and never hangs on a dead tty."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from console.watchdog import terminal_alive

ROOT = Path(__file__).resolve().parents[2]


def test_terminal_alive_turns_false_on_hangup():
    master, slave = pty.openpty()
    try:
        assert terminal_alive(slave, os.getppid())
        assert not terminal_alive(slave, os.getppid() + 1)  # orphaned: the parent changed
        os.close(master)  # the SSH side goes away: the slave is hung up
        master = -1
        assert not terminal_alive(slave, os.getppid())
    finally:
        os.close(slave)
        if master >= 0:
            os.close(master)


def test_pipe_is_not_a_terminal():
    r, w = os.pipe()
    try:
        assert not terminal_alive(r, os.getppid())
    finally:
        os.close(r)
        os.close(w)


def _spawn(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The real `ultra-console` on a fresh 80x24 pty (no Ray reachable); returns (process, pty master)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEXTUAL", "PYTEST"))}
    env.update(
        TERM="xterm-256color",
        ULTRA_CONSOLE_STATE_DIR=str(tmp_path / "state"),
        ULTRA_CONSOLE_CONFIG=str(tmp_path / "none.toml"),
        RAY_ADDRESS="http://127.0.0.1:9",
    )
    # Textual draws on stderr, so all three go to the pty; an unexpected error would exit 1 (cli.py).
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.cli"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    return proc, master


def _read_until(master: int, needle: bytes, timeout: float = 30) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_q_quits_and_says_the_run_keeps_going(tmp_path):
    proc, master = _spawn(tmp_path)
    try:
        assert b"Preflight" in _read_until(master, b"Preflight"), "the app never drew its first frame"
        os.write(master, b"q")
        assert b"the run keeps going on Ray" in _read_until(master, b"keeps going")
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_real_binary_exits_when_its_pty_hangs_up(tmp_path):
    proc, master = _spawn(tmp_path)
    try:
        assert b"Preflight" in _read_until(master, b"Preflight"), "the app never drew its first frame"
        os.close(master)
        master = -1
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master >= 0:
            os.close(master)
