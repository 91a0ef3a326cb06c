"""Notice a dead terminal (SSH session gone) so the app exits instead of spinning on a hung-up tty.

Textual installs no SIGHUP handler and a process whose pty was hung up can busy-loop (dolphie,
sngrep, btop all hit this). The app checks `terminal_alive` every few seconds and handles SIGHUP;
either way it exits cleanly, and the Ray run is unaffected.
"""

from __future__ import annotations

import os


def terminal_alive(fd: int, parent_pid: int) -> bool:
    """False once `fd` is no longer a usable tty or the process was orphaned (parent died)."""
    try:
        if not os.isatty(fd):  # a hung-up tty fails TCGETS with EIO, so this turns False
            return False
    except OSError:
        return False
    return os.getppid() == parent_pid
