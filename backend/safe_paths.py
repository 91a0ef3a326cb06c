"""The one rule for every path the console writes from a name it was given from outside (a hub's file
listing, a job id, a run id): the path lies inside its target directory, or it is refused.

Refused: an empty name, an absolute one, one with a `..` component, a control character or a NUL, and one
that symlinks in the target lead out of it. The message names the entry (as `repr`, so a hostile name
prints no escape sequence) in one line. Stdlib only and free of the rest of the console: the node-side
prepare job inlines this module (backend.cluster.node_job), where no console is installed.
"""

from __future__ import annotations

import os


class UnsafePath(ValueError):
    """A name that would be written outside its target directory (or could not be named safely)."""


def _shown(name: str) -> str:
    return repr(name[:200])


def lexically_inside(directory: str, name: str) -> str:
    """`directory/name` when the name alone keeps it inside (no `..`, not absolute, no control character);
    reads nothing on disk. Else UnsafePath."""
    if not name.strip():
        raise UnsafePath(f"refused entry {_shown(name)}: an empty name")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise UnsafePath(f"refused entry {_shown(name)}: it holds a control character")
    if os.path.isabs(name) or name.startswith(("\\", "~")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafePath(f"refused entry {_shown(name)}: an absolute path, outside {directory}")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise UnsafePath(f"refused entry {_shown(name)}: '..' leads outside {directory}")
    if all(p in ("", ".") for p in parts):
        raise UnsafePath(f"refused entry {_shown(name)}: it names the directory itself")
    return os.path.join(directory, name)


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
