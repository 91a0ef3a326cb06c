"""The stack dumper: a tiny Ray job pinned to one node that
dumps the Python stack of every process of a job there.

Self-contained on purpose (stdlib + psutil, which every Ray node has, and py-spy, which `ray[default]` puts
next to the node's python): the console sends this file's source as `python3 -c <source> --stacks ...`
through backend/cluster/node_job.py. Which processes: every process of this node that the reaper's rule
(backend/cluster/process_identity.py, inlined here) says is the job's; nothing else is ever attached to.
Each is dumped with `py-spy dump --json` (several at once, each bounded, the whole node bounded by a budget),
and a process that cannot be read says why in one field: ptrace refused, not a Python process, gone, slow.
One result line per process: `ULTRA_CONSOLE_STACKS {"pid": ..., ...}`; the last line (`pid` -1) sums up,
with `problem` set when nothing could be dumped here at all (py-spy missing).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from backend.cluster.process_identity import identify  # inlined on the node
from backend.json_fields import objects  # inlined on the node

MARK = "ULTRA_CONSOLE_STACKS "
MAX_THREADS = 128  # per process, so one line of the job log stays bounded
MAX_FRAMES = 96  # per thread (the innermost kept)
PARALLEL = 8
PTRACE_WORDS = ("Operation not permitted", "Permission denied", "ptrace", "EPERM")
NOT_PYTHON_WORDS = (
    "Failed to find python version",
    "Failed to get python version",
    "Failed to find a python",
    "not a python",
)
GONE_WORDS = ("No such process", "No such file or directory (os error 2)", "process exited")


def find_py_spy() -> str | None:
    """py-spy next to this node's python (where `ray[default]` installs it), else on PATH."""
    for base in (os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))):
        candidate = os.path.join(base, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy")


def raylet_of(proc) -> str | None:  # type: ignore[no-untyped-def]
    """The raylet a process works for: `RAY_RAYLET_PID` in its own environment or its nearest ancestor's
    (a job's driver and its shell carry none, their JobSupervisor does); None when no ancestor says."""
    try:
        for p in [proc, *proc.parents()]:
            with contextlib.suppress(psutil.AccessDenied, OSError):
                found = p.environ().get("RAY_RAYLET_PID")
                if found:
                    return str(found)
    except psutil.Error:
        return None
    return None


def job_processes(job_id: str, submission_id: str, workers: set[int]) -> list[tuple[int, str, str]]:
    """(pid, command line, why) of every process of this node that is the job's: by the reaper's rule
    (backend/cluster/process_identity.py), or listed by Ray as one of the job's actors on this node a moment
    ago (an actor in a worker Ray started before the job keeps `RAY_JOB_ID=ffffffff` in the environment the
    kernel shows). A process of another raylet (another node sharing this host's PIDs, as in a test cluster)
    is that node's to dump."""
    mine = raylet_of(psutil.Process())
    out = []
    for proc in psutil.process_iter():
        identity, why, _name, found = identify(proc.pid, job_id, submission_id, workers)
        if identity == "unidentified" and found is not None and proc.pid in workers:
            identity, why = "job", "Ray lists it as an actor of the job on this node"
        if identity != "job" or found is None:
            continue
        theirs = raylet_of(found)
        if mine and theirs and theirs != mine:
            continue
        try:
            cmd = " ".join(found.cmdline())
        except (psutil.Error, OSError):
            cmd = ""
        out.append((proc.pid, cmd[:400], why))
    return out


def classify(stderr: str) -> str:
    """Why py-spy could not read a process, as a kind: ptrace, not_python, gone or error."""
    if any(w in stderr for w in NOT_PYTHON_WORDS):
        return "not_python"
    if any(w in stderr for w in GONE_WORDS):
        return "gone"
    if any(w in stderr for w in PTRACE_WORDS):
        return "ptrace"
    return "error"


def _threads(raw: object) -> list[dict[str, object]]:
    threads = []
    for th in objects(raw):
        frames = [
            {
                "name": f.text("name", "?"),
                "file": f.text("short_filename") or f.text("filename"),
                "line": f.integer("line"),
            }
            for f in th.objs("frames")
        ]
        threads.append(
            {
                "name": th.text("thread_name"),
                "tid": th.integer("os_thread_id"),
                "active": th.has("active"),
                "gil": th.has("owns_gil"),
                "frames": frames[:MAX_FRAMES],
                "cut": max(0, len(frames) - MAX_FRAMES),
            }
        )
    return threads[:MAX_THREADS]


def dump(py_spy: str, pid: int, cmd: str, native: bool, timeout_s: float) -> dict[str, object]:
    """One process's stack by py-spy, or why not."""
    out: dict[str, object] = {"pid": pid, "cmd": cmd}
    argv = [py_spy, "dump", "--json", "--pid", str(pid), *(["--native"] if native else [])]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=max(0.1, timeout_s), check=False)
    except subprocess.TimeoutExpired:
        return {**out, "kind": "timeout", "error": f"py-spy did not finish in {timeout_s:.0f} s"}
    except OSError as err:
        return {**out, "kind": "error", "error": f"py-spy could not run: {err}"}
    out["seconds"] = round(time.monotonic() - started, 3)
    if done.returncode != 0:
        said = (done.stderr or done.stdout or "").split("Stack backtrace:")[0]
        text = " ".join(said.split())[:300] or f"py-spy exited {done.returncode}"
        return {**out, "kind": classify(text), "error": text}
    try:
        threads = _threads(json.loads(done.stdout))
    except ValueError:
        return {**out, "kind": "error", "error": "py-spy printed no JSON"}
    return {**out, "threads": threads}


def main(argv: list[str]) -> int:
    workers: set[int] = set()
    job_id = submission_id = ""
    native = False
    per_process_s, budget_s = 10.0, 40.0
    it = iter(argv)
    for arg in it:
        if arg == "--worker-pid":
            workers.add(int(next(it)))
        elif arg == "--submission-id":
            submission_id = next(it)
        elif arg == "--job-id":
            job_id = next(it)
        elif arg == "--native":
            native = True
        elif arg == "--per-process-s":
            per_process_s = float(next(it))
        elif arg == "--budget-s":
            budget_s = float(next(it))
    started = time.time()
    deadline = time.monotonic() + budget_s
    summary: dict[str, object] = {"pid": -1, "host": os.uname().nodename, "read_at": started}
    py_spy = find_py_spy()
    procs = job_processes(job_id, submission_id, workers)
    summary["processes"] = len(procs)
    if py_spy is None:
        summary["problem"] = (
            f"py-spy is not installed on this node (looked next to {sys.executable} and on PATH)"
        )
    else:
        summary["py_spy"] = py_spy

        def one(item: tuple[int, str, str]) -> dict[str, object]:
            left = deadline - time.monotonic()
            if left <= 0:
                out: dict[str, object] = {
                    "pid": item[0],
                    "cmd": item[1],
                    "kind": "timeout",
                    "error": f"not dumped: the node's budget of {budget_s:.0f} s ran out",
                }
            else:
                out = dump(py_spy, item[0], item[1], native, min(per_process_s, left))
            return {**out, "why": item[2]}

        with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(procs)))) as pool:
            for result in pool.map(one, procs):
                print(MARK + json.dumps(result, sort_keys=True), flush=True)
    summary["seconds"] = round(time.time() - started, 3)
    print(MARK + json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
