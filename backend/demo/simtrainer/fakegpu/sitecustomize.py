"""Fake NVIDIA GPUs inside Ray's own dashboard agent (a simulation aid; see ray.md §4.4).

Put this directory on PYTHONPATH of a Ray node: every Python process imports it at start-up,
but it only acts inside the dashboard agent (`ray/dashboard/agent.py`), where it replaces the
NVML calls of `NvidiaGpuProvider`, so the real reporter, GCS, `/nodes?view=summary` and the
Prometheus gauges all carry GPUs that do not exist. Labelled "(fake)" in the device name.

Data, re-read at every report (every 5 s):
* holdings: `$FAKE_GPU_DIR/<node_id>/gpu<i>-<pid>.json` = `{"mem": MiB, "util": %}` written by a
  process that "holds" GPU i (the simulated trainer does); entries of dead pids are ignored,
  like NVML forgets a process that exited; `"host": true` marks a PID of the host's PID namespace,
  which NVML reports inside a container whatever the container's /proc shows (or does not show);
* overrides: `$FAKE_GPU_DIR/<node_id>/override.json` = `{"3": {"util": 99, "mem_used": 140000}}`.
Environment: FAKE_GPU_COUNT (default 8), FAKE_GPU_MEM_TOTAL (MiB, default 143771, an H200).
"""

import os
import sys


def _node_id_from_argv(argv):
    for i, arg in enumerate(argv):
        if arg.startswith("--node-id="):
            return arg.split("=", 1)[1]
        if arg == "--node-id" and i + 1 < len(argv):
            return argv[i + 1]
    return "unknown"


def _alive(pid):
    """Like NVML: a process that exited (or is a zombie awaiting its reaper) holds nothing."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _read_json(path):
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _fake_gpus(node_id):
    count = int(os.environ.get("FAKE_GPU_COUNT", "8"))
    total = int(os.environ.get("FAKE_GPU_MEM_TOTAL", "143771"))
    base = os.path.join(os.environ.get("FAKE_GPU_DIR", "/nonexistent"), node_id)
    holders = {i: {} for i in range(count)}
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("gpu") and name.endswith(".json") and "-" in name):
            continue
        idx_text, pid_text = name[3:-5].split("-", 1)
        if not (idx_text.isdigit() and pid_text.isdigit()):
            continue
        idx, pid = int(idx_text), int(pid_text)
        data = _read_json(os.path.join(base, name)) or {}
        if idx not in holders or not (data.get("host") or _alive(pid)):
            continue
        holders[idx][pid] = {"pid": pid, "gpu_memory_usage": int(data.get("mem", 0)),
                             "gpu_utilization": int(data.get("util", 0))}
    overrides = _read_json(os.path.join(base, "override.json")) or {}
    gpus = []
    for idx in range(count):
        procs = holders[idx]
        mem = 615 + sum(p["gpu_memory_usage"] for p in procs.values())  # 615 MiB: idle H200 in Ray
        util = max((p["gpu_utilization"] for p in procs.values()), default=0)
        over = overrides.get(str(idx)) or {}
        gpus.append({
            "index": idx, "name": "NVIDIA H200 (fake)", "uuid": f"GPU-fake-{node_id[:12]}-{idx}",
            "utilization_gpu": int(over.get("util", util)),
            "memory_used": int(over.get("mem_used", min(mem, total))), "memory_total": total,
            "processes_pids": procs, "power_mw": 90000 + 6000 * util, "temperature_c": 30 + util // 3,
        })
    return gpus


def _install():
    from ray.dashboard.modules.reporter import gpu_providers

    node_id = _node_id_from_argv(sys.argv)
    cls = gpu_providers.NvidiaGpuProvider

    def _initialize(self):
        self._initialized = True
        return True

    cls.is_available = lambda self: True
    cls._initialize = _initialize
    cls._shutdown = lambda self: None
    cls.get_gpu_utilization = lambda self: _fake_gpus(node_id)


# The dashboard agent (telemetry), and the console's GPU kill job (backend/cluster/reaper_job.py, marked
# `--gpu-reaper`), which asks NVML through Ray's same provider before killing a PID: both see one fake.
if sys.argv and (sys.argv[0].replace("\\", "/").endswith("ray/dashboard/agent.py") or "--gpu-reaper" in sys.argv):
    try:
        _install()
    except Exception as err:  # never keep the agent from starting
        sys.stderr.write(f"fake GPU shim not installed: {err!r}\n")
