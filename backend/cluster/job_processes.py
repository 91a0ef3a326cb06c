"""The processes of this node that are a job's, for the node-pinned scripts that read them (stacks, the
flight recorder's collector): stdlib + psutil, inlined on the node (backend/cluster/node_job.py).

Why one module: the rule is the reaper's (backend/cluster/process_identity.py), plus the actors Ray listed
for the job on this node, minus what another raylet owns; every reader must see the same processes.
"""

from __future__ import annotations

import contextlib

import psutil

from backend.cluster.process_identity import identify  # inlined on the node


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
        found, why = _the_jobs(proc.pid, job_id, submission_id, workers)
        if found is None:
            continue
        theirs = raylet_of(found)
        if mine and theirs and theirs != mine:
            continue
        out.append((proc.pid, _cmdline(found)[:400], why))
    return out


def _the_jobs(pid: int, job_id: str, submission_id: str, workers: set[int]):  # type: ignore[no-untyped-def]
    """(the psutil process, why) when `pid` is the job's; (None, why) otherwise."""
    identity, why, _name, found = identify(pid, job_id, submission_id, workers)
    if identity == "unidentified" and found is not None and pid in workers:
        identity, why = "job", "Ray lists it as an actor of the job on this node"
    return (found, why) if identity == "job" else (None, why)


def _cmdline(proc) -> str:  # type: ignore[no-untyped-def]
    """The process's command line; "" when it is gone or unreadable."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return ""


def job_args(argv: list[str]) -> tuple[str, str, set[int], dict[str, str]]:
    """(job id, submission id, worker pids) as FootPrint.identity_args passes them, and every other
    `--flag value` as {flag: value} (a flag followed by another flag, or by nothing, maps to "")."""
    workers: set[int] = set()
    rest: dict[str, str] = {}
    for flag, value in _flag_pairs(argv):
        if flag == "--worker-pid" and value is not None:
            workers.add(int(value))
        else:
            rest[flag] = value or ""
    return rest.pop("--job-id", ""), rest.pop("--submission-id", ""), workers, rest


def _flag_pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) in order; the value is None when the next word is another flag or there is none."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        pairs.append((argv[i], value))
        i += 1 if value is None else 2
    return pairs
