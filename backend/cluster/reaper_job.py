"""The reaper: a tiny Ray job pinned to one node that
reads NVML there and then, and kills only the job's PIDs.

Self-contained on purpose (stdlib + psutil + ray, which every Ray node has): the console sends this
file's source as `python3 -c <source> --gpu-reaper --node-id=ID ...`, so worker nodes need no copy of
the console. Three modes:

* `--list`: which processes hold GPU memory on this node now (NVML through Ray's own GPU provider, the
  same source as the dashboard's telemetry, but read at this moment rather than up to 5 s ago), each
  with its identity: `job` (provably the run's), `unidentified` or `exempt`.
* `--pid N ...`: the same fresh reading and the same identity check again, then SIGTERM, a short grace,
  SIGKILL, for the PIDs that still hold GPU memory and are still provably the job's. Nothing else.
* `--tree PID --job SID`: force-stop, SIGKILL a driver's process tree once its environment shows it is
  that job's driver.

Identity: NVML inside a container reports host PIDs, so a PID number alone proves nothing. A PID is the
job's only if this node's PID namespace shows it and its environment carries the job's Ray job id
(`RAY_JOB_ID`, set by the raylet on every worker and inherited by SGLang's children) or its submission id
(in `RAY_JOB_CONFIG_JSON_ENV_VAR`, set on the driver), or it descends from a worker PID recorded for the
job while it ran. Ray's daemons and this job's own ancestors are exempt whatever they carry. Never by name.
One result line per PID: `ULTRA_CONSOLE_REAP {"pid": ..., ...}`; the last line (`pid` -1) sums up.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psutil

from backend.cluster.process_identity import carries_job, identify  # inlined on the node
from backend.json_fields import Fields  # inlined on the node

MARK = "ULTRA_CONSOLE_REAP "
UNLISTED_SHARE = 0.10  # a GPU this full with no process listed: NVML cannot name its holder here


def gpu_reading() -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]] | None:
    """([(gpu, pid, MiB)] of every process holding memory, [(gpu, used MiB, total MiB)]) read now, or None
    when no GPU provider answers on this node."""
    # ray: a slow import, paid only by the mode that needs it
    from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

    provider = GpuMetricProvider()
    if not provider.initialize():
        return None
    holders: list[tuple[int, int, int]] = []
    gpus: list[tuple[int, int, int]] = []
    for gpu in map(Fields.of, provider.get_gpu_usage()):
        index = gpu.integer("index")
        gpus.append((index, gpu.integer("memory_used"), gpu.integer("memory_total")))
        procs = gpu.value("processes_pids")  # pid (an int) -> {"gpu_memory_usage": MiB, ...}
        for pid, info in procs.items() if isinstance(procs, dict) else ():
            mem = Fields.of(info).integer("gpu_memory_usage")
            if mem > 0:
                holders.append((index, int(pid), mem))
    return holders, gpus


def list_holders(
    job_id: str, submission_id: str, worker_pids: set[int]
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The fresh reading with an identity per holder, and the summary fields (nvml, unlisted GPUs)."""
    reading = gpu_reading()
    if reading is None:
        return [], {"nvml": False}
    holders, gpus = reading
    listed = {gpu for gpu, _, _ in holders}
    unlisted = [
        [gpu, used]
        for gpu, used, total in gpus
        if gpu not in listed and total and used > UNLISTED_SHARE * total
    ]
    out: list[dict[str, object]] = []
    for gpu, pid, mem in holders:
        identity, why, name, _ = identify(pid, job_id, submission_id, worker_pids)
        out.append({"pid": pid, "gpu": gpu, "mem_mb": mem, "identity": identity, "reason": why, "name": name})
    return out, {"nvml": True, "unlisted": unlisted}


def _gone(proc, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    """Exited (or a zombie waiting for a parent that is not us to reap it) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _signal(proc, grace_s: float) -> dict[str, object]:  # type: ignore[no-untyped-def]

    try:
        proc.terminate()
        if _gone(proc, grace_s):
            return {"action": "killed", "signal": "SIGTERM"}
        proc.kill()
        if not _gone(proc, 10.0):
            return {"action": "failed", "reason": "still alive 10 s after SIGKILL"}
        return {"action": "killed", "signal": "SIGKILL"}
    except psutil.NoSuchProcess:
        return {"action": "skipped", "reason": "already exited"}
    except psutil.AccessDenied as err:
        return {"action": "failed", "reason": repr(err)}


def reap(
    pids: list[int], grace_s: float, job_id: str, submission_id: str, worker_pids: set[int]
) -> list[dict[str, object]]:
    """Signal each PID that a fresh reading shows holding
    GPU memory and that is, checked again now, the job's."""
    try:
        reading = gpu_reading()
    except Exception as err:
        return [{"pid": 0, "action": "error", "reason": f"GPU query failed: {err!r}"}]
    held: dict[int, int] = {}
    for _, pid, mem in reading[0] if reading is not None else ():
        held[pid] = held.get(pid, 0) + mem  # one process on several GPUs: all it holds
    results: list[dict[str, object]] = []
    for pid in pids:
        out: dict[str, object] = {"pid": pid}
        if reading is None:
            out.update(
                action="skipped",
                reason="no GPU provider on this node: cannot verify the PID holds GPU memory",
            )
        elif pid not in held:
            out.update(action="skipped", reason="no longer holds GPU memory")
        else:
            identity, why, name, proc = identify(pid, job_id, submission_id, worker_pids)
            if identity != "job" or proc is None:
                out.update(action="skipped", reason=why)
            else:
                out.update(name=name, mem_mb=held[pid], **_signal(proc, grace_s))
        results.append(out)
    return results


def kill_tree(pid: int, submission_id: str) -> list[dict[str, object]]:
    """Force-stop: SIGKILL a job's driver and its descendants, after checking from the driver's own
    environment (Ray puts the submission id there) that the PID really is that job's driver."""
    try:
        proc = psutil.Process(pid)
        env = proc.environ()
    except psutil.NoSuchProcess:
        return [{"pid": pid, "action": "skipped", "reason": "already exited"}]
    except psutil.AccessDenied as err:
        return [{"pid": pid, "action": "failed", "reason": f"cannot read its environment: {err!r}"}]
    if carries_job(env, "", submission_id) is None:
        return [
            {
                "pid": pid,
                "action": "skipped",
                "reason": f"its environment does not name job {submission_id!r}",
            }
        ]
    tree = [proc, *proc.children(recursive=True)]
    out: list[dict[str, object]] = []
    for p in tree:
        try:
            p.kill()
            out.append({"pid": p.pid, "action": "killed", "signal": "SIGKILL"})
        except psutil.NoSuchProcess:
            out.append({"pid": p.pid, "action": "skipped", "reason": "already exited"})
    psutil.wait_procs(tree, timeout=10)
    return out


class _Request:
    """What the console asked of this node: kill a tree, list holders, or reap PIDs."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.workers: set[int] = set()
        self.grace = 5.0
        self.tree_of: int | None = None
        self.listing = False
        self.job_id = self.submission_id = ""

    def set_pid(self, value: str) -> None:
        self.pids.append(int(value))

    def set_worker(self, value: str) -> None:
        self.workers.add(int(value))

    def set_grace(self, value: str) -> None:
        self.grace = float(value)

    def set_tree(self, value: str) -> None:
        self.tree_of = int(value)

    def set_submission(self, value: str) -> None:
        self.submission_id = value

    def set_job(self, value: str) -> None:
        self.job_id = value


_VALUED = {  # each flag that takes a value: what it sets
    "--pid": _Request.set_pid,
    "--worker-pid": _Request.set_worker,
    "--grace": _Request.set_grace,
    "--tree": _Request.set_tree,
    "--job": _Request.set_submission,
    "--submission-id": _Request.set_submission,
    "--job-id": _Request.set_job,
}


def _parse(argv: list[str]) -> _Request:
    """The request in `argv` (unknown words ignored)."""
    request = _Request()
    it = iter(argv)
    for arg in it:
        if arg in _VALUED:
            _VALUED[arg](request, next(it))
        elif arg == "--list":
            request.listing = True
    return request


def _answer(r: _Request) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The per-process items and the summary's extra fields."""
    if r.tree_of is not None:
        return kill_tree(r.tree_of, r.submission_id), {}
    if r.listing:
        return list_holders(r.job_id, r.submission_id, r.workers)
    return reap(r.pids, r.grace, r.job_id, r.submission_id, r.workers), {}


def main(argv: list[str]) -> int:
    started = time.time()
    items, summary = _answer(_parse(argv))
    for item in items:
        print(MARK + json.dumps(item, sort_keys=True), flush=True)
    print(
        MARK
        + json.dumps(
            {
                "pid": -1,
                "action": "done",
                "seconds": round(time.time() - started, 2),
                "host": os.uname().nodename,
                "read_at": started,
                **summary,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
