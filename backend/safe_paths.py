"""The one rule for every path the console writes from a name it was given from outside (a hub's file
listing, a job id, a run id): the path lies inside its target directory, or it is refused.

Refused: an empty name, an absolute one, one with a `..` component, a control character or a NUL, and one
that symlinks in the target lead out of it. The message names the entry (as `repr`, so a hostile name
prints no escape sequence) in one line. Stdlib only and free of the rest of the console: the node-side
prepare job inlines this module (backend.cluster.node_job), where no console is installed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
from typing import IO


class UnsafePath(ValueError):
    """A name that would be written outside its target directory (or could not be named safely)."""


def _shown(name: str) -> str:
    return repr(name[:200])


def lexically_inside(directory: str, name: str) -> str:
    """`directory/name` when the name alone keeps it inside (no `..`, not absolute, no control character);
    reads nothing on disk. Else UnsafePath."""
    why = _name_refusal(name, directory)
    if why is not None:
        raise UnsafePath(f"refused entry {_shown(name)}: {why}")
    return os.path.join(directory, name)


def _name_refusal(name: str, directory: str) -> str | None:
    """Why `name` alone could lead outside `directory` (or is no entry of it); None when it cannot."""
    if not name.strip():
        return "an empty name"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        return "it holds a control character"
    if _absolute(name):
        return f"an absolute path, outside {directory}"
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        return f"'..' leads outside {directory}"
    if all(p in ("", ".") for p in parts):
        return "it names the directory itself"
    return None


def _absolute(name: str) -> bool:
    """Absolute here or on Windows (a drive letter, a backslash root) or a home directory."""
    return os.path.isabs(name) or name.startswith(("\\", "~")) or (len(name) > 1 and name[1] == ":")


def inside(directory: str, name: str) -> str:
    """`directory/name`, proven to stay inside `directory` with symlinks resolved (check it right before
    writing, and open with O_NOFOLLOW); else UnsafePath."""
    path = lexically_inside(directory, name)
    root = os.path.realpath(directory)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or real == root:
        raise UnsafePath(f"refused entry {_shown(name)}: a symlink leads outside {directory}")
    return path


def all_inside(directory: str, names: list[str]) -> list[str]:
    """Every name checked (by name) before anything is written: one bad entry refuses the whole list."""
    return [lexically_inside(directory, name) for name in names]


# ---------------------------------------------------------------- files the console writes itself
#
# Every file the console writes (audit log, spools, stacks dumps, probe leases and locks) lives in a
# directory the console either created itself (0700) or proved to be this user's own, and is opened
# relative to that directory's descriptor with O_NOFOLLOW: a link at the file's name, or a directory swapped
# for a link after the check, is refused, never followed. Nothing is ever chmod-ed by path.

NAME_LIMIT = 96  # bytes of a file name built from a network name (ext4 allows 255)
_NAME_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def safe_name(raw: str, suffix: str = "", limit: int = NAME_LIMIT) -> str:
    """A file name for `raw` (a job id, a node name: any text, any length): ASCII letters, digits and
    `._-` kept, anything else `_`; when that changed the name or it is long, a digest of the original keeps
    two different names apart. Never longer than `limit` bytes with `suffix`, never hidden, never empty."""
    kept = "".join(c if c in _NAME_SAFE else "_" for c in raw).lstrip(".")
    room = max(limit - len(suffix), 24)
    if kept == raw and kept and len(kept) <= room:
        return kept + suffix
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{kept[: room - 17] or 'x'}-{digest}{suffix}"


def _owner_line(path: str, st: os.stat_result) -> str | None:
    """Why this directory is not one the console may write in, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"others may write in it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_dir(path: str | os.PathLike[str], *, create: bool = True) -> str:
    """`path` as a directory of this user's own: missing parts are created 0700 (never chmod-ed later); the
    directory itself must be a real directory (no symlink), owned by this user and writable by no one
    else, and no directory on the way may be another user's link or a world-writable one without the
    sticky bit. Else UnsafePath, in one line; OSError (no space, no permission) as it comes; with `create`
    False a missing directory is FileNotFoundError (a reader creates nothing)."""
    full = os.path.abspath(os.fspath(path))
    walked = os.sep
    for part in full.strip(os.sep).split(os.sep):
        walked = os.path.join(walked, part)
        try:
            st = os.lstat(walked)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(walked, 0o700)
            st = os.lstat(walked)
        if walked != full:
            _check_ancestor(walked, st)
    why = _owner_line(full, os.lstat(full))
    if why is not None:
        raise UnsafePath(f"refused directory {_shown(full)}: {why}")
    return full


def _check_ancestor(walked: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
        raise UnsafePath(f"refused directory {_shown(walked)}: a symlink of another user on the way")
    if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        raise UnsafePath(f"refused directory {_shown(walked)}: anyone may rename entries in it")


def open_private(
    directory: str | os.PathLike[str], name: str, flags: int, mode: int = 0o600, *, create: bool = True
) -> int:
    """A descriptor for `directory/name`: the directory proven (`private_dir`, created if missing), the file
    opened relative to it with O_NOFOLLOW and O_NONBLOCK (a FIFO never blocks) and checked to be a regular
    file. `name` is one component. UnsafePath for a link, a special file or a foreign directory."""
    folder = PrivateDir(directory, create=create)
    try:
        return folder.open(name, flags, mode)
    finally:
        folder.close()


class PrivateDir:
    """A directory of this user's own (`private_dir`), held by a descriptor: files opened and renamed
    relative to it, so a writer that keeps one (the GPU probe, once a second) proves the path once and
    re-checks the directory with one fstat per use instead of walking the path again."""

    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True) -> None:
        self.where = private_dir(directory, create=create)
        self.fd = os.open(self.where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, name: str, flags: int, mode: int = 0o600) -> int:
        """`name` in this directory (one component, O_NOFOLLOW, a regular file only), as `open_private`."""
        if os.sep in name or name in ("", ".", ".."):
            raise UnsafePath(f"refused entry {_shown(name)}: not one file name")
        if _owner_line(self.where, os.fstat(self.fd)) is not None:  # swapped after the check
            raise UnsafePath(f"refused directory {_shown(self.where)}: it changed while being opened")
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.EMLINK):  # the name is a symlink (EMLINK on BSDs)
                raise UnsafePath(
                    f"refused {_shown(os.path.join(self.where, name))}: it is a symlink"
                ) from None
            raise
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise UnsafePath(f"refused {_shown(os.path.join(self.where, name))}: not a regular file")
        os.set_blocking(fd, True)
        return fd

    def replace(self, name: str, data: bytes) -> None:
        """`name` replaced by `data` in one step (a reader sees the old file or the new, never half):
        written to `name.tmp`, then renamed within this directory."""
        tmp = name + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)


def exclusive_lock(directory: str | os.PathLike[str], name: str) -> IO[bytes] | None:
    """`directory/name` opened as `open_private` does and locked (flock, non-blocking): the handle to keep
    open while the holder runs, or None when another process holds the lock."""
    handle = os.fdopen(open_private(directory, name, os.O_RDWR | os.O_CREAT), "rb")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def write_private(directory: str | os.PathLike[str], name: str, data: bytes, *, append: bool = False) -> None:
    """Write `data` to `directory/name` as `open_private` opens it: appended, or replacing what was there."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = open_private(directory, name, flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_private_tail(directory: str | os.PathLike[str], name: str, limit: int) -> tuple[bytes, bool]:
    """The last `limit` bytes of `directory/name` (opened as `open_private` does, creating nothing) and
    whether anything before them was left out; FileNotFoundError when there is no such file."""
    fd = open_private(directory, name, os.O_RDONLY, create=False)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        chunks, pos = [], start
        while pos < size:
            chunk = os.pread(fd, min(size - pos, 1 << 20), pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks), start > 0
    finally:
        os.close(fd)
