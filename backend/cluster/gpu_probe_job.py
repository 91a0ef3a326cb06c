"""The console's GPU probe: one Ray job that reads NVML on every alive node and prints what it reads, at once.

Why: Ray's reporter reads NVML every 5 s and the node summary is cached 2 s more, so the GPU pane lagged NVML
by 5-10 s (ray.md §8); miles' own streams are no fresher at miles' defaults. This job reads NVML four times a
second and prints a compact line per node as soon as something changed (utilisation, memory, a process) and at
least once a second; the console follows its log as it
follows a run's (Ray's tail reads the file once a second).

Self-contained (stdlib + ray, which every Ray node has), sent as `python3 -c <source> --gpu-probe ...`. The
driver runs on the head (pinned by the console) and samples the head itself; every other alive node gets a
sampler actor pinned to it (`num_cpus=0, num_gpus=0`: it reserves nothing a run could need); nodes are
re-listed every few seconds, so a node that joins later is sampled too. NVML only (through Ray's own GPU
provider, as the reaper reads it): never a CUDA context, so
the probe holds no GPU memory and never shows as a GPU process.

Lifetime: consoles keep a lease each, a file in `--lease-dir` (on the head) whose mtime they renew; the probe
ends by itself once no lease is fresher than `--lease-timeout` (also when its last console was SIGKILLed or
lost its SSH session), and after `--max-age` at the latest (its log grows with every line; a console starts a
fresh one). One probe per cluster: the first takes an exclusive lock
in the lease directory; a second one says so and ends.

Lines (`ULTRA_CONSOLE_GPU {json}`): `hello`, one `s` per node and reading sent
(`g`: [[index, util % or -1, MiB used, MiB total, W or -1, °C or -1, [[pid, MiB], ...]], ...]; `nvml`: why
there is no reading; `c`: the sampling process's CPU
seconds), `leases` (the fresh lease names, on change), `bye`.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # Ray's own types; the script needs nothing from them at run time
    from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

MARK = "ULTRA_CONSOLE_GPU "
NODE_ENV = "ULTRA_CONSOLE_GPU_PROBE_NODE"  # marks a sampler actor's process (and names its node)
LOCK_NAME = "probe.lock"
LEASE_SUFFIX = ".lease"
RELIST_S = 5.0
READ_S = 0.25  # NVML is read this often; a line goes out at once on a change, else every `--interval`
UTIL_STEP, MEM_STEP_MIB = 5, 256  # what counts as a change worth a line of its own


# One GPU as a line carries it: index, util % or -1, MiB used, MiB total, W or -1, °C or -1,
# [[pid, MiB], ...].
GpuRow = tuple[int, int, int, int, int, int, list[list[int]]]


class Reading(TypedDict, total=False):
    """One node's reading as its line carries it: `t` and `c` always; `g`, or `nvml` saying why not."""

    t: float
    g: list[GpuRow]
    nvml: str
    c: float


def changed(old: Reading | None, new: Reading) -> bool:
    """Whether `new` says something `old` did not: utilisation or memory moved, a process came or went."""
    old_g, new_g = (old or {}).get("g"), new.get("g")
    if old is None or (old_g is None) != (new_g is None) or len(old_g or ()) != len(new_g or ()):
        return True
    for a, b in zip(old_g or (), new_g or (), strict=True):
        if abs(a[1] - b[1]) >= UTIL_STEP or abs(a[2] - b[2]) >= MEM_STEP_MIB or a[6] != b[6]:
            return True
    return False


_PRINT = threading.Lock()


# Ray 2.60's log tail (dashboard/modules/job/utils.py, file_tail_iterator) sends a chunk at once when it holds
# 10 lines, else only after its next 1 s sleep at the end of the file: every line padded to 10 reaches the
# console a second sooner (measured: pane lag median 1.7 s -> see bench/gpu_pane_lag.py), for 9 bytes.
TAIL_CHUNK_LINES = 10


def emit(obj: dict[str, object]) -> None:
    line = MARK + json.dumps(obj, separators=(",", ":")) + "\n" * TAIL_CHUNK_LINES
    with _PRINT:  # one whole line at a time: the relay threads print too
        sys.stdout.write(line)
        sys.stdout.flush()


def _int(value: object) -> int:
    try:
        return int(value) if isinstance(value, (int, float, str)) else -1
    except ValueError:
        return -1


class NodeSampler:
    """Reads this node's GPUs through Ray's GPU provider (NVML, or AMD SMI), never through CUDA."""

    def __init__(self) -> None:
        self.why = ""
        self.provider: GpuMetricProvider | None = None
        self._sent: Reading | None = None
        self._sent_at = -float("inf")
        try:
            # ray: a slow import, paid only by the mode that needs it
            from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

            provider = GpuMetricProvider()
            if provider.initialize():
                self.provider = provider
            else:
                self.why = "no NVML (or AMD SMI) answers on this node"
        except Exception as err:  # a broken driver must not end the probe: say so per sample
            self.why = f"GPU provider failed: {type(err).__name__}: {err}"[:200]

    def read(self) -> Reading:
        out: Reading = {"t": round(time.time(), 3)}
        if self.provider is None:
            out["nvml"] = self.why
        else:
            gpus: list[GpuRow] = []
            for gpu in self.provider.get_gpu_usage():
                procs = [
                    [int(pid), _int((info or {}).get("gpu_memory_usage"))]
                    for pid, info in (gpu.get("processes_pids") or {}).items()
                ]
                power = gpu.get("power_mw")
                gpus.append(
                    (
                        _int(gpu.get("index")),
                        _int(gpu.get("utilization_gpu")),
                        _int(gpu.get("memory_used")),
                        _int(gpu.get("memory_total")),
                        -1 if power is None else round(int(power) / 1000),
                        _int(gpu.get("temperature_c")),
                        procs,
                    )
                )
            out["g"] = gpus
        times = os.times()
        out["c"] = round(times.user + times.system, 2)
        return out

    def due(self, reading: Reading, interval: float) -> bool:
        """Whether `reading` goes out: a change since the last one sent, or `interval` without a line."""
        now = time.monotonic()
        if now - self._sent_at >= interval or changed(self._sent, reading):
            self._sent, self._sent_at = reading, now
            return True
        return False

    def stream(self, interval: float) -> Iterator[Reading]:
        """The node's readings for ever, each as soon as it shows a change (NVML read every READ_S) and at
        least one every `interval`: one streaming call (a reading costs one report to the driver, not a task:
        a third of the CPU of a call per second, measured)."""
        tick = time.monotonic()
        while True:
            reading = self.read()
            if self.due(reading, interval):
                yield reading
            tick += READ_S
            time.sleep(max(0.0, tick - time.monotonic()))


def fresh_leases(lease_dir: str, timeout_s: float) -> list[str]:
    """Names of the leases renewed within `timeout_s`."""
    now = time.time()
    found = []
    try:
        names = os.listdir(lease_dir)
    except OSError:
        return []
    for name in names:
        if not name.endswith(LEASE_SUFFIX):
            continue
        try:
            if now - os.stat(os.path.join(lease_dir, name)).st_mtime <= timeout_s:
                found.append(name[: -len(LEASE_SUFFIX)])
        except OSError:
            continue
    return sorted(found)


def take_lock(lease_dir: str) -> IO[str] | None:
    """The probe's exclusive lock (kept open while it runs), or None when another probe holds it."""
    os.makedirs(lease_dir, exist_ok=True)
    try:
        os.chmod(lease_dir, 0o1777)  # consoles of other users renew their own lease here, never another's
    except OSError:
        pass
    handle = open(os.path.join(lease_dir, LOCK_NAME), "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


Actors = dict[str, Any]  # node id -> its sampler actor (a Ray handle: its methods are only known at run time)


def _alive_nodes(ray: Any) -> set[str]:
    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}


def _relay(ray: Any, node: str, actor: Any, interval: float, actors: Actors) -> None:
    """Print every reading of one node's sampler until it ends (its node died); then forget it (re-made at the
    next listing if the node is alive)."""
    try:
        for ref in actor.stream.options(num_returns="streaming").remote(interval):
            emit({"k": "s", "n": node, **ray.get(ref)})
    except Exception as err:
        emit({"k": "lost", "n": node, "why": type(err).__name__})
    if actors.get(node) is actor:
        actors.pop(node, None)


def run(node_id: str, lease_dir: str, lease_timeout: float, interval: float, max_age: float) -> str:
    """Sample until no lease is fresh (or `max_age`); returns why it ended."""
    # ray: a slow import, paid only by the mode that needs it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", log_to_driver=False, logging_level=40)  # logging.ERROR
    sampler_cls = ray.remote(num_cpus=0, num_gpus=0, max_restarts=0)(NodeSampler)
    head = NodeSampler()
    actors: Actors = {}
    started = time.monotonic()
    listed_at = -RELIST_S
    said_leases: list[str] | None = None
    tick = checked_at = started
    while True:
        if time.monotonic() - listed_at >= RELIST_S:
            listed_at = time.monotonic()
            for node in sorted(_alive_nodes(ray) - set(actors) - {node_id}):
                actor = actors[node] = sampler_cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                    enable_task_events=False,
                    runtime_env={"env_vars": {NODE_ENV: node}},
                ).remote()
                threading.Thread(
                    target=_relay, args=(ray, node, actor, interval, actors), daemon=True
                ).start()
        reading = head.read()
        if head.due(reading, interval):
            emit({"k": "s", "n": node_id, **reading})
        if time.monotonic() - checked_at >= interval:
            checked_at = time.monotonic()
            leases = fresh_leases(lease_dir, lease_timeout)
            if leases != said_leases:
                said_leases = leases
                emit({"k": "leases", "ids": leases})
            age = time.monotonic() - started
            if not leases and age > lease_timeout:
                return f"no console renewed a lease in {lease_timeout:.0f} s"
            if age > max_age:
                return f"lifetime of {max_age:.0f} s reached (a console starts a fresh probe)"
        tick += READ_S
        time.sleep(max(0.0, tick - time.monotonic()))


def main(argv: list[str]) -> int:
    opts = {
        "--node-id": "",
        "--lease-dir": "",
        "--lease-timeout": "45",
        "--interval": "1",
        "--max-age": "3600",
    }
    it = iter(argv)
    for arg in it:
        key, _, value = arg.partition("=")
        if key in opts:
            opts[key] = value if value else next(it, "")
    lease_dir = opts["--lease-dir"]
    if not lease_dir or not opts["--node-id"]:
        emit({"k": "bye", "why": "usage: --gpu-probe --node-id=ID --lease-dir=DIR"})
        return 2
    lock = take_lock(lease_dir)
    if lock is None:
        emit({"k": "duplicate", "why": "another GPU probe holds this cluster's lock"})
        return 0
    emit(
        {
            "k": "hello",
            "pid": os.getpid(),
            "node": opts["--node-id"],
            "lease_dir": lease_dir,
            "lease_timeout": float(opts["--lease-timeout"]),
            "interval": float(opts["--interval"]),
        }
    )
    why = run(
        opts["--node-id"],
        lease_dir,
        float(opts["--lease-timeout"]),
        float(opts["--interval"]),
        float(opts["--max-age"]),
    )
    lock.close()  # a successor may start while this one winds down
    emit({"k": "bye", "why": why})
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    # Past this point only Ray's driver teardown runs, with sampler streams still open on other nodes; it can
    # end the process non-zero, and the job would read FAILED although the probe ended as it should.
    os._exit(code)
