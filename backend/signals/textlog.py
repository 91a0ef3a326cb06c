"""Is this file a text log at all? An empty or a mostly binary file is bad input (one line, exit 1), not a
run with no metric: the operator picked the wrong file, and the console says so instead of diagnosing
garbage.

Text that is mostly text is text: crashed nodes leave NUL-padded tails (and a log truncated under its
writer a sparse head of NULs), a torn write leaves invalid UTF-8, a stray blob some control bytes. Those
never refuse a log: the store drops and counts them (backend.signals.store.UnreadableBytes). NUL bytes are
not judged at all; of the rest, only a file whose sniffed bytes are mostly no text is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from backend.errors import ConsoleError
from backend.regular_files import open_regular
from backend.sanitize import STRAY_CONTROLS, one_line

SNIFF_BYTES = 64 * 1024  # of text (NULs not counted) judged
SNIFF_LIMIT = 64 << 20  # read at most this far for them (a NUL-padded head)
MAX_BINARY_SHARE = 0.30  # of the sniffed non-NUL bytes that may be no text (stray controls, invalid UTF-8)
_BAD_UTF8 = re.compile("[\udc80-\udcff]+")  # what `surrogateescape` makes of each invalid byte
_NOT_CONTROL = bytes(b for b in range(256) if b not in STRAY_CONTROLS)


class NotALogError(ConsoleError):
    """The file holds no text a log could be made of."""


def binary_share(sample: bytes) -> float:
    """The share of `sample`'s bytes (NULs removed) that are no text: stray controls and invalid UTF-8."""
    if not sample:
        return 0.0
    controls = len(sample.translate(None, _NOT_CONTROL))
    text = sample.decode("utf-8", errors="surrogateescape")
    invalid = sum(map(len, _BAD_UTF8.findall(text))) if not sample.isascii() else 0
    return (controls + invalid) / len(sample)


def _sniff(path: Path) -> tuple[bytes, int]:
    """Up to SNIFF_BYTES of the file's non-NUL bytes, and how many bytes were read for them."""
    kept: list[bytes] = []
    have = read = 0
    with open_regular(path, "log") as fh:  # refused by type first: a FIFO would block, a device never end
        while have < SNIFF_BYTES and read < SNIFF_LIMIT:
            piece = fh.read(1 << 20 if read else SNIFF_BYTES)
            if not piece:
                break
            read += len(piece)
            piece = piece.replace(b"\x00", b"")
            kept.append(piece)
            have += len(piece)
    return b"".join(kept)[:SNIFF_BYTES], read


def check_text_log(path: Path) -> None:
    """Raise NotALogError for an empty file, one of NULs only, or one whose start is mostly binary."""
    name = one_line(str(path))
    if not path.exists():
        raise NotALogError(f"no such log file: {name}")
    try:
        head, read = _sniff(path)
    except OSError as err:
        raise NotALogError(f"cannot read {name}: {err.strerror}") from None
    if not head.strip():
        what = f"holds only NUL bytes in its first {read:,}" if read and not head else "is empty"
        raise NotALogError(f"{name} {what}: not a Ray job log or a miles log")
    if binary_share(head) > MAX_BINARY_SHARE:
        raise NotALogError(
            f"{name} is binary, not a text log (pick the Ray job's log or a miles --dump-details dir)"
        )
