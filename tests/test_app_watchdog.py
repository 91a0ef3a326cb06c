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

ROOT = Path(__file__).resolve().parent.parent


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


def test_real_binary_exits_when_its_pty_hangs_up(tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEXTUAL", "PYTEST"))}
    env.update(TERM="xterm-256color", ULTRA_CONSOLE_STATE_DIR=str(tmp_path / "state"),
               ULTRA_CONSOLE_CONFIG=str(tmp_path / "none.toml"), RAY_ADDRESS="http://127.0.0.1:9")
    # Textual draws on stderr, so all three go to the pty; an unexpected error would exit 1 (cli.py).
    proc = subprocess.Popen([sys.executable, "-m", "console.cli"], stdin=slave, stdout=slave, stderr=slave,
                            env=env, cwd=ROOT, start_new_session=True, close_fds=True)
    os.close(slave)
    try:
        seen, deadline = b"", time.monotonic() + 30
        while b"Preflight" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                seen += os.read(master, 65536)
        assert b"Preflight" in seen, "the app never drew its first frame"
        os.close(master)
        master = -1
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master >= 0:
            os.close(master)
