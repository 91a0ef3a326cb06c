"""Open only regular files: every reader of an operator-named or run-written path goes through here.

Why: opening a FIFO blocks until a writer comes (the console hangs before its first frame, `q` ignored);
`/dev/zero` never ends (100% CPU, memory without bound); a socket cannot be read at all. So a path is
refused by its type before it is read: `stat` first (a clear line for the operator), then the open itself is
non-blocking and the opened file is checked again (`fstat`), so a path swapped for a FIFO between the two
never blocks either.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from backend.errors import ConsoleError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFileError(ConsoleError):
    """The path exists but is not a regular file (a FIFO, device, socket or directory)."""


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words ("a regular file" for one)."""
    return next(
        (name for test, name in _KINDS if test(mode)),
        "a regular file" if stat.S_ISREG(mode) else "not a regular file",
    )


def refuse_special(path: str | os.PathLike[str], what: str = "file") -> None:
    """Raise NotRegularFileError unless `path` is a regular file (following symlinks); OSError as it comes."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(
            f"{what} {path} is {kind_of(mode)}, not a regular file: refused (it could block or never end)"
        )


def open_regular(path: str | os.PathLike[str], what: str = "file") -> BinaryIO:
    """The file opened for binary reading, only if it is a regular file; never blocks on a special file.

    Raises NotRegularFileError (a FIFO, device, socket, directory) or OSError (missing, no permission).
    """
    refuse_special(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the stat and the open
            raise NotRegularFileError(f"{what} {path} is {kind_of(mode)}, not a regular file: refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | os.PathLike[str], what: str = "file", limit: int | None = None) -> bytes:
    """A regular file's bytes (at most `limit`), refused by type first."""
    with open_regular(path, what) as fh:
        return fh.read() if limit is None else fh.read(limit)


def read_regular_text(path: str | os.PathLike[str], what: str = "file", limit: int | None = None) -> str:
    """A regular file's text (UTF-8), refused by type first; raises UnicodeDecodeError for bad bytes."""
    return read_regular_bytes(path, what, limit).decode("utf-8")
