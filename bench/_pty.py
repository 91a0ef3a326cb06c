"""Run a command in a pseudo-terminal of a given size and count what it writes (for console benches).

Why a pty: bytes/s to the terminal and CPU are what an SSH session pays; Textual only draws to a
real terminal. The reader thread drains the master side continuously (like a terminal would).
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Sequence

import psutil


class PtyApp:
    def __init__(
        self, argv: Sequence[str], *, cols: int = 200, rows: int = 50, env: dict[str, str] | None = None
    ):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        full_env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", TEXTUAL_ANIMATIONS="none")
        full_env.pop("COLUMNS", None)
        full_env.pop("LINES", None)
        full_env.update(env or {})
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.bytes = 0
        self.buffer = bytearray()
        self.first_seen: dict[bytes, float] = {}
        self._watch: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def watch(self, *markers: bytes) -> None:
        self._watch.extend(markers)

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            now = time.perf_counter()
            with self._lock:
                self.bytes += len(chunk)
                if self._watch:
                    self.buffer += chunk
                    for m in self._watch:
                        if m not in self.first_seen and m in self.buffer:
                            self.first_seen[m] = now - self.started
                    if len(self.buffer) > 1 << 20:
                        del self.buffer[: -(1 << 16)]

    def wait_for(self, marker: bytes, timeout: float = 60.0) -> float:
        """Seconds from spawn until `marker` was first written."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if marker in self.first_seen:
                return self.first_seen[marker]
            if self.proc.poll() is not None:
                raise RuntimeError(f"app exited ({self.proc.returncode}) before writing {marker!r}")
            time.sleep(0.005)
        raise TimeoutError(f"{marker!r} not written within {timeout}s")

    def measure(self, seconds: float) -> tuple[float, float]:
        """(CPU % of one core, bytes/s to the terminal) over `seconds`, app and its children."""
        proc = psutil.Process(self.proc.pid)
        procs = [proc, *proc.children(recursive=True)]
        cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
        b0, t0 = self.bytes, time.perf_counter()
        time.sleep(seconds)
        cpu1 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
        b1, t1 = self.bytes, time.perf_counter()
        return 100.0 * (cpu1 - cpu0) / (t1 - t0), (b1 - b0) / (t1 - t0)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        os.close(self.master)
