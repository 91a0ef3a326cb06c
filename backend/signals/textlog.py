"""Is this file a text log at all? An empty or binary file is bad input (one line, exit 1), not a run with
no metric: the operator picked the wrong file, and the console says so instead of diagnosing garbage."""

from __future__ import annotations

from pathlib import Path

from backend.errors import ConsoleError
from backend.regular_files import read_regular_bytes
from backend.sanitize import one_line

SNIFF_BYTES = 64 * 1024
MAX_CONTROL_SHARE = 0.10  # of the sniffed bytes that may be controls other than tab, CR, LF, ESC


class NotALogError(ConsoleError):
    """The file holds no text a log could be made of."""


def check_text_log(path: Path) -> None:
    """Raise NotALogError for an empty file or one whose start is binary (NUL bytes, mostly controls)."""
    name = one_line(str(path))
    if not path.exists():
        raise NotALogError(f"no such log file: {name}")
    try:  # refused by type first: a FIFO would block, a device never end
        head = read_regular_bytes(path, "log", SNIFF_BYTES)
    except OSError as err:
        raise NotALogError(f"cannot read {name}: {err.strerror}") from None
    if not head.strip():
        raise NotALogError(f"{name} is empty: not a Ray job log or a miles log")
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27))
    if b"\x00" in head or controls > MAX_CONTROL_SHARE * len(head):
        raise NotALogError(
            f"{name} is binary, not a text log (pick the Ray job's log or a miles --dump-details dir)"
        )
