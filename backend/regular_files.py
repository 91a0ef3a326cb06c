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


CONFIG_CAP = 4 << 20  # a config, preset or rules file is a few KiB; anything past this is no config


class FileTooLargeError(NotRegularFileError):
    """A file over the size its kind may have: refused by its size, before a byte is read."""


def read_config_text(path: str | os.PathLike[str], what: str = "config file", cap: int = CONFIG_CAP) -> str:
    """A config-like file's text, refused by type and then by size before it is read (a 1 GiB "config" is one
    line at once, not a read of 1 GiB first); at most `cap` bytes are ever read, even from a growing file."""
    with open_regular(path, what) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(cap + 1) if size <= cap else b""
    if size > cap or len(data) > cap:
        raise FileTooLargeError(
            f"{what} {path} is {max(size, len(data)) / (1 << 20):.0f} MiB: over the {cap >> 20} MiB such a "
            "file may be, refused before reading"
        )
    return data.decode("utf-8")
