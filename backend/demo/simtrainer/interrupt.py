"""How the simulated trainer meets SIGINT (Ray's job stop with RAY_JOB_STOP_SIGNAL=SIGINT): it says so at once
and is gone within a bound, as a trainer shutting down cleanly is.

Why a watcher thread: Python runs a signal's handler in the main thread only, between bytecodes. On a loaded
CI runner a driver waiting in `ray.get` was seen not to raise its KeyboardInterrupt before Ray's SIGKILL 45 s
later, so the run ended without its clean-shutdown line (and the tests that stop a run failed). The C-level
handler writes the signal's number to a wakeup fd from whichever thread the kernel picked, at once; this
thread reads it, says the line, and ends the process after GRACE_S if the main thread has not.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

GRACE_S = 15.0  # after SIGINT, the main thread's own shutdown gets this long; Ray's SIGKILL comes later


class Once:
    """A callable that runs `action` the first time only, from whichever thread asks first."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action = action
        self._lock = threading.Lock()
        self.done = False

    def __call__(self) -> None:
        with self._lock:
            if self.done:
                return
            self.done = True
        self._action()


class InterruptWatch:
    """Says `interrupted` the moment SIGINT arrives; runs `finish` and exits 130 if the main thread has not
    called `ended()` within `grace_s`."""

    def __init__(self, interrupted: Once, finish: Once, grace_s: float = GRACE_S) -> None:
        self.interrupted = interrupted
        self.finish = finish
        self._grace_s = grace_s
        self._ended = threading.Event()

    def start(self) -> bool:
        """Watch from now on (False where it cannot: not on the main thread, which alone sets a wakeup fd)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), daemon=True, name="sigint-watch").start()
        return True

    def _watch(self, fd: int) -> None:
        while int(signal.SIGINT) not in os.read(fd, 64):
            pass
        self.interrupted()
        if not self._ended.wait(self._grace_s):
            self.finish()
            os._exit(130)

    def ended(self) -> None:
        """The main thread has shut down: nothing more for the watcher to do."""
        self._ended.set()
