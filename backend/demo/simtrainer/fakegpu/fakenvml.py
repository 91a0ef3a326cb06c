"""What the fake NVML of one node reports now: the GPUs of a loopback test node and who "holds" them.

Why a module of its own: Ray's dashboard agent (through sitecustomize.py, which imports it by its bare
name from this directory on PYTHONPATH) and the simulated trainer's miles-dashboard GPU sampler
(`backend.demo.simtrainer.dashboard`) must read one and the same fake hardware, so the two sources the
console compares can only differ by their age. Standard library only: it runs inside Ray's agent.

Data, re-read at every call:
* holdings: `$FAKE_GPU_DIR/<node_id>/gpu<i>-<pid>.json` = `{"mem": MiB, "util": %}` written by a
  process that "holds" GPU i; entries of dead pids are ignored, like NVML forgets a process that exited;
* overrides: `$FAKE_GPU_DIR/<node_id>/override.json` = `{"3": {"util": 99, "mem_used": 140000}}`.
Environment: FAKE_GPU_COUNT (default 8), FAKE_GPU_MEM_TOTAL (MiB, default 143771, an H200).
"""

import json
import os
from typing import Any

IDLE_MIB = 615  # what an idle H200 shows as used in NVML (the driver's own reservation)
H200_TOTAL_MIB = 143771


def gpu_count() -> int:
    return int(os.environ.get("FAKE_GPU_COUNT", "8"))


def total_mib() -> int:
    return int(os.environ.get("FAKE_GPU_MEM_TOTAL", str(H200_TOTAL_MIB)))


def _alive(pid: int) -> bool:
    """Like NVML: a process that exited (or is a zombie awaiting its reaper) holds nothing."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def fake_gpus(node_id: str) -> list[dict[str, Any]]:
    """Ray's `NvidiaGpuProvider.get_gpu_utilization()` rows for the node, from the holding files."""
    count, total = gpu_count(), total_mib()
    base = os.path.join(os.environ.get("FAKE_GPU_DIR", "/nonexistent"), node_id)
    holders: dict[int, dict[int, dict[str, int]]] = {i: {} for i in range(count)}
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
        # "host": a PID of the host's namespace, which NVML
        # reports inside a container whatever its /proc shows
        if idx not in holders or not (data.get("host") or _alive(pid)):
            continue
        holders[idx][pid] = {
            "pid": pid,
            "gpu_memory_usage": int(data.get("mem", 0)),
            "gpu_utilization": int(data.get("util", 0)),
        }
    overrides = _read_json(os.path.join(base, "override.json")) or {}
    gpus = []
    for idx in range(count):
        procs = holders[idx]
        mem = IDLE_MIB + sum(p["gpu_memory_usage"] for p in procs.values())  # 615 MiB: idle H200 in Ray
        util = max((p["gpu_utilization"] for p in procs.values()), default=0)
        over = overrides.get(str(idx)) or {}
        gpus.append(
            {
                "index": idx,
                "name": "NVIDIA H200 (fake)",
                "uuid": f"GPU-fake-{node_id[:12]}-{idx}",
                "utilization_gpu": int(over.get("util", util)),
                "memory_used": int(over.get("mem_used", min(mem, total))),
                "memory_total": total,
                "processes_pids": procs,
                "power_mw": 90000 + 6000 * util,
                "temperature_c": 30 + util // 3,
            }
        )
    return gpus
