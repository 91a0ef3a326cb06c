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


def _holding(base: str, name: str) -> tuple[int, int, dict[str, int]] | None:
    """(GPU, pid, the process row) of one `gpu<i>-<pid>.json`; None for another file or a dead pid."""
    if not (name.startswith("gpu") and name.endswith(".json") and "-" in name):
        return None
    idx_text, pid_text = name[3:-5].split("-", 1)
    if not (idx_text.isdigit() and pid_text.isdigit()):
        return None
    idx, pid = int(idx_text), int(pid_text)
    data = _read_json(os.path.join(base, name)) or {}
    # "host": a PID of the host's namespace, which NVML
    # reports inside a container whatever its /proc shows
    if not (data.get("host") or _alive(pid)):
        return None
    row = {
        "pid": pid,
        "gpu_memory_usage": int(data.get("mem", 0)),
        "gpu_utilization": int(data.get("util", 0)),
    }
    return idx, pid, row


def _holders(base: str, count: int) -> dict[int, dict[int, dict[str, int]]]:
    """Each GPU's processes by pid, from the holding files of the node."""
    holders: dict[int, dict[int, dict[str, int]]] = {i: {} for i in range(count)}
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        found = _holding(base, name)
        if found is not None and found[0] in holders:
            idx, pid, row = found
            holders[idx][pid] = row
    return holders


def _gpu_row(
    node_id: str, idx: int, procs: dict[int, dict[str, int]], over: dict, total: int
) -> dict[str, Any]:
    """One GPU as Ray's provider reports it: its holders' memory on top of an idle H200's, their top
    utilisation, unless the override file says otherwise."""
    mem = IDLE_MIB + sum(p["gpu_memory_usage"] for p in procs.values())  # 615 MiB: idle H200 in Ray
    util = max((p["gpu_utilization"] for p in procs.values()), default=0)
    return {
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


def fake_gpus(node_id: str) -> list[dict[str, Any]]:
    """Ray's `NvidiaGpuProvider.get_gpu_utilization()` rows for the node, from the holding files."""
    count, total = gpu_count(), total_mib()
    base = os.path.join(os.environ.get("FAKE_GPU_DIR", "/nonexistent"), node_id)
    holders = _holders(base, count)
    overrides = _read_json(os.path.join(base, "override.json")) or {}
    return [
        _gpu_row(node_id, idx, holders[idx], overrides.get(str(idx)) or {}, total) for idx in range(count)
    ]


# --------------------------------------------------------------------------- pynvml's own calls
# The console's GPU probe reads NVML itself (pynvml), not through Ray's provider: these are pynvml's calls the
# probe makes, over the same fake hardware, with pynvml's units (bytes, mW) and its result objects' fields.


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Cached:
    """One node's rows, re-read at most every 50 ms: a probe's read asks each GPU several things at once."""

    def __init__(self, node_id: str) -> None:
        self.node_id, self.at = node_id, -1.0
        self.rows: list[dict[str, Any]] = []

    def row(self, index: int) -> dict[str, Any]:
        import time

        now = time.monotonic()
        if now - self.at > 0.05:
            self.rows, self.at = fake_gpus(self.node_id), now
        return self.rows[index]


def pynvml_calls(node_id: str) -> dict[str, Any]:
    """pynvml's functions as the fake NVML of `node_id` answers them (handles are GPU indexes)."""
    cache = _Cached(node_id)

    def procs(h: int) -> list[_Struct]:
        return [
            _Struct(pid=p, usedGpuMemory=r["gpu_memory_usage"] * MIB)
            for p, r in cache.row(h)["processes_pids"].items()
        ]

    return {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": gpu_count,
        "nvmlDeviceGetHandleByIndex": lambda i: int(i),
        "nvmlDeviceGetUtilizationRates": lambda h: _Struct(gpu=cache.row(h)["utilization_gpu"], memory=0),
        "nvmlDeviceGetMemoryInfo": lambda h: _Struct(
            used=cache.row(h)["memory_used"] * MIB,
            total=cache.row(h)["memory_total"] * MIB,
            free=(cache.row(h)["memory_total"] - cache.row(h)["memory_used"]) * MIB,
        ),
        "nvmlDeviceGetPowerUsage": lambda h: cache.row(h)["power_mw"],
        "nvmlDeviceGetTemperature": lambda h, _sensor: cache.row(h)["temperature_c"],
        "nvmlDeviceGetComputeRunningProcesses": procs,
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
    }


MIB = 1 << 20
