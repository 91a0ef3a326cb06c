"""Whose process is this? The one rule that decides which processes on a node are a job's.

Stdlib + psutil only, and inlined into the node-pinned scripts (backend/cluster/node_job.py) that use it:
the reaper (which kills only the job's GPU holders) and the stack dumper (which dumps only the job's
processes), so both recognise a job's processes the same way. A PID is the job's only if this node's PID
namespace shows it and its environment carries the job's Ray job id (`RAY_JOB_ID`, set by the raylet on
every worker and inherited by SGLang's children) or its submission id (in `RAY_JOB_CONFIG_JSON_ENV_VAR`, set
on the driver), or it descends from a worker PID recorded for the job while it ran. Ray's daemons and the
asking job's own ancestors are exempt whatever they carry. Never by name.
"""

from __future__ import annotations

import json

import psutil

_UNKNOWN = "held by a process this node cannot identify as the job's"
RAY_DAEMONS = (
    "raylet",
    "gcs_server",
    "dashboard",
    "DashboardAgent",
    "runtime_env/agent",
    "log_monitor",
    "monitor.py",
    "ray_client_server",
)


def _protected(proc) -> str | None:  # type: ignore[no-untyped-def]

    me = psutil.Process()
    if proc.pid in {me.pid, *(p.pid for p in me.parents())}:
        return "it is this node job (the one asking) or one of its parents"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.AccessDenied, psutil.ZombieProcess):
        cmd = ""
    if any(name in cmd for name in RAY_DAEMONS):
        return "it is a Ray daemon"
    return None


def carries_job(env: dict[str, str], job_id: str, submission_id: str) -> str | None:
    if job_id and env.get("RAY_JOB_ID") == job_id:
        return f"its environment carries the job's Ray job id {job_id}"
    if submission_id:
        try:
            config = json.loads(env.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
        except ValueError:
            config = {}
        meta = config.get("metadata") if isinstance(config, dict) else None
        if isinstance(meta, dict) and meta.get("job_submission_id") == submission_id:
            return f"its environment carries the job's submission id {submission_id}"
    return None


def identify(pid: int, job_id: str, submission_id: str, worker_pids: set[int]):  # type: ignore[no-untyped-def]
    """(identity, why, process name, the psutil process or None) of `pid`: identity is "job", "unidentified"
    or "exempt". A signal goes to that same process object: psutil refuses it if the PID was reused since."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
    except psutil.NoSuchProcess:
        return "unidentified", f"{_UNKNOWN}: pid {pid} is not visible in this node's PID namespace", "", None
    except psutil.AccessDenied:
        name = ""
    why = _protected(proc)
    if why:
        return "exempt", f"refused: {why}", name, proc
    identity, why, kept = _by_environment(proc, job_id, submission_id, worker_pids)
    return identity, why, name, kept


def _by_environment(proc, job_id: str, submission_id: str, worker_pids: set[int]):  # type: ignore[no-untyped-def]
    """(identity, why, the process or None when it exited): the job's ids in its environment, else an
    ancestor among the job's workers."""
    try:
        env = proc.environ()
    except psutil.NoSuchProcess:
        return "unidentified", f"{_UNKNOWN}: it exited while being checked", None
    except (psutil.AccessDenied, OSError) as err:
        return "unidentified", f"{_UNKNOWN}: its environment cannot be read ({type(err).__name__})", proc
    carried = carries_job(env, job_id, submission_id)
    if carried:
        return "job", carried, proc
    ancestor = _worker_ancestor(proc, worker_pids)
    if ancestor is not None:
        return "job", f"it descends from the job's worker pid {ancestor}", proc
    return "unidentified", f"{_UNKNOWN}: no job id in its environment", proc


def _worker_ancestor(proc, worker_pids: set[int]) -> int | None:  # type: ignore[no-untyped-def]
    """The nearest ancestor that is one of the job's worker processes, if any."""
    try:
        return next((p.pid for p in proc.parents() if p.pid in worker_pids), None)
    except psutil.NoSuchProcess:
        return None
