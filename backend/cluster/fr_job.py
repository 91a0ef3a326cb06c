"""The flight recorder's collector: a tiny Ray job pinned to one node that asks each of the job's processes
there for its PyTorch Flight Recorder trace and its Python traceback, through torch's worker debug server.

Self-contained (stdlib + psutil), sent as `python3 -c <source> --fr ...` by backend/cluster/node_job.py.
Which processes: the same rule as `stacks` (backend/cluster/job_processes.py, inlined here). Which socket:
torch's `_WorkerServer` (torch.distributed, 2.13) listens on a unix socket and answers HTTP there
(`POST /handler/fr_trace_json`, `/handler/dump_traceback`, `/handler/ping`); a socket counts as one only
when the process itself listens on it and it is the process's `TORCH_WORKER_SERVER_SOCKET` (or starts with
it: one per rank), or lies in the run's flight-recorder folder (the folder of `TORCH_FR_DUMP_TEMP_FILE`).
Nothing else is ever connected to. The trace is cut down here to what the analyzer reads (the last
MAX_ENTRIES collectives), so one result line stays bounded. One line per process with a server:
`ULTRA_CONSOLE_FR {"pid": ..., "trace": {...}, "traceback": "..."}` or its `error`; the last (`pid` -1)
sums up (how many of the job's processes run no server).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from backend.cluster.job_processes import job_args, job_processes  # inlined on the node

MARK = "ULTRA_CONSOLE_FR "
SERVER_ENV = "TORCH_WORKER_SERVER_SOCKET"
PREFIX_ENV = "TORCH_FR_DUMP_TEMP_FILE"
MAX_ENTRIES = 600  # the newest collectives of a process (of torch's 2000-entry ring)
MAX_TRACEBACK = 20000
MAX_BODY = 64 << 20
PARALLEL = 8
ENTRY_KEYS = ("collective_seq_id", "process_group", "profiling_name", "input_sizes", "is_p2p", "frames")
_RANK = re.compile(r"rank[_-]?(\d+)")


def ask(path: str, handler: str, timeout_s: float) -> str:
    """One HTTP/1.1 request to torch's worker server on the unix socket `path`; the body, or OSError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(max(0.1, timeout_s))
        s.connect(path)
        s.sendall(
            f"POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = bytearray()
        while len(data) <= MAX_BODY:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    if " 200 " not in f"{status} ":
        raise OSError(f"{handler} answered {status or 'nothing'}: {body[:200].decode('utf-8', 'replace')}")
    return body.decode("utf-8", "replace")


def servers(pid: int) -> list[str]:
    """The unix sockets `pid` listens on that are torch worker servers of the run (see the module)."""
    try:
        proc = psutil.Process(pid)
        env = proc.environ()
        conns = proc.net_connections(kind="unix")
    except (psutil.Error, OSError):
        return []
    named = env.get(SERVER_ENV, "")
    folder = os.path.dirname(env.get(PREFIX_ENV, ""))
    out = []
    for c in conns:
        path = c.laddr if isinstance(c.laddr, str) else ""
        if not path or path.startswith("\0"):
            continue
        if (named and path.startswith(named)) or (folder and os.path.dirname(path) == folder):
            out.append(path)
    return sorted(set(out))


def compact(body: str) -> dict[str, object]:
    """The trace as the analyzer reads it: the newest MAX_ENTRIES entries, their needed keys, pg_config."""
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError("not a flight-recorder trace (no entries list)")
    entries = [e for e in data["entries"] if isinstance(e, dict)][-MAX_ENTRIES:]
    return {
        "entries": [{k: e[k] for k in ENTRY_KEYS if k in e} for e in entries],
        "pg_config": data.get("pg_config") if isinstance(data.get("pg_config"), dict) else {},
        "cut": max(0, len(data["entries"]) - MAX_ENTRIES),
    }


def read_one(pid: int, cmd: str, path: str, timeout_s: float) -> dict[str, object]:
    """One process's trace and traceback from its server at `path`, or why not."""
    found = _RANK.search(os.path.basename(path))
    out: dict[str, object] = {
        "pid": pid,
        "cmd": cmd,
        "socket": path,
        "rank": int(found.group(1)) if found else None,
    }
    started = time.monotonic()
    try:
        out["trace"] = compact(ask(path, "fr_trace_json", timeout_s))
    except (OSError, ValueError, RecursionError) as err:
        return {**out, "error": f"no flight-recorder trace: {err}"}
    try:
        out["traceback"] = ask(path, "dump_traceback", timeout_s)[-MAX_TRACEBACK:]
    except OSError as err:
        out["traceback_error"] = str(err)[:300]
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def main(argv: list[str]) -> int:
    job_id, submission_id, workers, rest = job_args(argv)
    per_process_s = float(rest.get("--per-process-s") or 10.0)
    started = time.time()
    procs = job_processes(job_id, submission_id, workers)
    asked = [(pid, cmd, why, path) for pid, cmd, why in procs for path in servers(pid)]
    without = len(procs) - len({item[0] for item in asked})
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(asked)))) as pool:
        for result in pool.map(lambda a: {**read_one(a[0], a[1], a[3], per_process_s), "why": a[2]}, asked):
            print(MARK + json.dumps(result), flush=True)
    summary = {
        "pid": -1,
        "host": os.uname().nodename,
        "processes": len(procs),
        "without_server": without,
        "seconds": round(time.time() - started, 3),
    }
    print(MARK + json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
