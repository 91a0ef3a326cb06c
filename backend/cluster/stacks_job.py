"""The stack dumper: a tiny Ray job pinned to one node that
dumps the Python stack of every process of a job there.

Self-contained on purpose (stdlib + psutil, which every Ray node has, and py-spy, which `ray[default]` puts
next to the node's python): the console sends this file's source as `python3 -c <source> --stacks ...`
through backend/cluster/node_job.py. Which processes: every process of this node that the reaper's rule
(backend/cluster/job_processes.py, inlined here) says is the job's; nothing else is ever attached to.
Each is dumped with `py-spy dump --json` (several at once, each bounded, the whole node bounded by a budget),
and a process that cannot be read says why in one field: ptrace refused, not a Python process, gone, slow.
One result line per process: `ULTRA_CONSOLE_STACKS {"pid": ..., ...}`; the last line (`pid` -1) sums up,
with `problem` set when nothing could be dumped here at all (py-spy missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from backend.cluster.job_processes import job_args, job_processes  # inlined on the node
from backend.cluster.node_tools import classify, find_py_spy  # inlined on the node
from backend.json_fields import objects  # inlined on the node

MARK = "ULTRA_CONSOLE_STACKS "
MAX_THREADS = 128  # per process, so one line of the job log stays bounded
MAX_FRAMES = 96  # per thread (the innermost kept)
PARALLEL = 8


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
    job_id, submission_id, workers, rest = job_args(argv)
    native = "--native" in rest
    per_process_s = float(rest.get("--per-process-s") or 10.0)
    budget_s = float(rest.get("--budget-s") or 40.0)
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
