"""The kill job of `ultra-console cleanup`: runs as a tiny Ray job pinned to one node.

Self-contained on purpose (stdlib + psutil + ray, which every Ray node has): the console sends this
file's source as `python3 -c <source> --gpu-reaper --node-id=ID --pid N ...`, so worker nodes need
no copy of the console. For each PID it asks NVML, through Ray's own GPU provider (the same source
as the dashboard's telemetry), whether the PID still holds GPU memory on this node, and only then
signals it: SIGTERM, a short grace, SIGKILL. Never by name, never Ray's own daemons, never an
ancestor of this process. One result line per PID: `ULTRA_CONSOLE_REAP {"pid": ..., "action": ...}`.
"""

from __future__ import annotations

import json
import os
import sys
import time

MARK = "ULTRA_CONSOLE_REAP "
RAY_DAEMONS = ("raylet", "gcs_server", "dashboard", "DashboardAgent", "runtime_env/agent", "log_monitor",
               "monitor.py", "ray_client_server")


def gpu_holders() -> dict[int, int] | None:
    """PID -> MiB held on this node's GPUs, or None when no GPU provider answers here."""
    from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

    provider = GpuMetricProvider()
    if not provider.initialize():
        return None
    held: dict[int, int] = {}
    for gpu in provider.get_gpu_usage():
        for pid, info in (gpu.get("processes_pids") or {}).items():
            mem = int((info or {}).get("gpu_memory_usage") or 0)
            if mem > 0:
                held[int(pid)] = held.get(int(pid), 0) + mem
    return held


def _protected(proc) -> str | None:  # type: ignore[no-untyped-def]
    import psutil

    me = psutil.Process()
    if proc.pid in {me.pid, *(p.pid for p in me.parents())}:
        return "it is this cleanup job or one of its parents"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.AccessDenied, psutil.ZombieProcess):
        cmd = ""
    if any(name in cmd for name in RAY_DAEMONS):
        return "it is a Ray daemon"
    return None


def _gone(proc, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    """Exited (or a zombie waiting for a parent that is not us to reap it) within `timeout`."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def reap(pids: list[int], grace_s: float) -> list[dict[str, object]]:
    import psutil

    results: list[dict[str, object]] = []
    try:
        held = gpu_holders()
    except Exception as err:
        held = None
        results.append({"pid": 0, "action": "error", "reason": f"GPU query failed: {err!r}"})
    for pid in pids:
        out: dict[str, object] = {"pid": pid}
        if held is None:
            out.update(action="skipped", reason="no GPU provider on this node: cannot verify the PID holds GPU memory")
        elif pid not in held:
            out.update(action="skipped", reason="no longer holds GPU memory")
        else:
            try:
                proc = psutil.Process(pid)
                why = _protected(proc)
                if why:
                    out.update(action="skipped", reason=f"refused: {why}")
                else:
                    out["name"] = proc.name()
                    out["mem_mb"] = held[pid]
                    proc.terminate()
                    if _gone(proc, grace_s):
                        out.update(action="killed", signal="SIGTERM")
                    else:
                        proc.kill()
                        if not _gone(proc, 10.0):
                            raise psutil.TimeoutExpired(10.0, pid)
                        out.update(action="killed", signal="SIGKILL")
            except psutil.NoSuchProcess:
                out.update(action="skipped", reason="already exited")
            except (psutil.AccessDenied, psutil.TimeoutExpired) as err:
                out.update(action="failed", reason=repr(err))
        results.append(out)
    return results


def kill_tree(pid: int, submission_id: str) -> list[dict[str, object]]:
    """Force-stop: SIGKILL a job's driver and its descendants, after checking from the driver's own
    environment (Ray puts the submission id there) that the PID really is that job's driver."""
    import psutil

    try:
        proc = psutil.Process(pid)
        config = json.loads(proc.environ().get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    except psutil.NoSuchProcess:
        return [{"pid": pid, "action": "skipped", "reason": "already exited"}]
    except (psutil.AccessDenied, ValueError) as err:
        return [{"pid": pid, "action": "failed", "reason": f"cannot read its environment: {err!r}"}]
    owner = (config.get("metadata") or {}).get("job_submission_id")
    if owner != submission_id:
        return [{"pid": pid, "action": "skipped", "reason": f"belongs to job {owner!r}, not {submission_id!r}"}]
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


def main(argv: list[str]) -> int:
    pids: list[int] = []
    grace = 5.0
    tree_of: int | None = None
    job = ""
    it = iter(argv)
    for arg in it:
        if arg == "--pid":
            pids.append(int(next(it)))
        elif arg == "--grace":
            grace = float(next(it))
        elif arg == "--tree":
            tree_of = int(next(it))
        elif arg == "--job":
            job = next(it)
    started = time.time()
    for item in kill_tree(tree_of, job) if tree_of is not None else reap(pids, grace):
        print(MARK + json.dumps(item, sort_keys=True), flush=True)
    print(MARK + json.dumps({"pid": -1, "action": "done", "seconds": round(time.time() - started, 2),
                             "host": os.uname().nodename}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
