"""What several node jobs need alike (stdlib only, inlined into each job's script by
backend/cluster/node_job.py): where a node keeps py-spy and why py-spy could not read a process
(stacks_job.py and doctor_job.py alike), and a path that names the node (prepare_job.py and doctor_job.py)."""

from __future__ import annotations

import os
import shutil
import sys

PTRACE_WORDS = ("Operation not permitted", "Permission denied", "ptrace", "EPERM")
NOT_PYTHON_WORDS = (
    "Failed to find python version",
    "Failed to get python version",
    "Failed to find a python",
    "not a python",
)
GONE_WORDS = ("No such process", "No such file or directory (os error 2)", "process exited")


def find_py_spy(search_path: str | None = None) -> str | None:
    """py-spy next to this node's python (where `ray[default]` installs it), else on PATH; with
    `search_path` (a PATH-like list of directories), there only."""
    if search_path is not None:
        return shutil.which("py-spy", path=search_path)
    for base in (os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))):
        candidate = os.path.join(base, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy")


def expand(path: str, fields: dict[str, str]) -> str:
    """A path may name the node ({node_id}, {node_ip},
    {hostname}) where nodes keep files in node-specific places."""
    if "{" not in path:
        return path
    try:
        return path.format_map(fields)
    except (KeyError, ValueError, IndexError):
        return path


def classify(stderr: str) -> str:
    """Why py-spy could not read a process, as a kind: ptrace, not_python, gone or error."""
    if any(w in stderr for w in NOT_PYTHON_WORDS):
        return "not_python"
    if any(w in stderr for w in GONE_WORDS):
        return "gone"
    if any(w in stderr for w in PTRACE_WORDS):
        return "ptrace"
    return "error"
