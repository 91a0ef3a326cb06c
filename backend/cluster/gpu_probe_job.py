"""The console's GPU probe: reads NVML on every alive node once a second and leaves the readings in a file on
the head that the console (on the same head) reads.

Why: Ray's reporter reads NVML every 5 s and the node summary is cached 2 s more, so the GPU pane lagged NVML
by 5-10 s (ray.md §8). Why this shape (bench/gpu_pane_lag.py measured each part on an H200): a Ray job keeps
Ray's JobSupervisor beside its driver (it polls the driver 10 times a second, ~1 % of a core alone), Ray's GPU
provider costs ~3.5 ms of CPU per read where plain NVML costs ~0.2 ms, and Ray's log tail delivers a job's
lines once a second in chunks (~2 s behind). So the job (`python3 -c <source> --gpu-probe ...`) only starts
the probe and ends: a detached actor pinned to the head (`--node-id`, NodeAffinity: any Ray 2.x, no label
selector needed), named after its lease directory so a cluster holds one per lease directory, reserving
nothing (`num_cpus=0, num_gpus=0`). It reads NVML directly (Ray's own vendored pynvml, else nvidia-ml-py;
never a CUDA context, so it holds no GPU memory and never shows as a GPU process): utilisation and memory
every second, power, temperature and the processes every PROCS_EVERY_S or at once when memory moved. Every
other alive node gets a sampler actor of the same kind, streaming its readings to the hub through Ray; nodes
are re-listed every few seconds, so a node that joins later is sampled too. The hub replaces
`<lease-dir>/readings.json` (atomically) whenever a reading came in, at most ~1 s after NVML's. Its CPU (≤ 1 %
of a core per node): each actor samples in its own main thread, inside a long task (an actor whose main
thread idles in Ray's task loop wakes 100 times a second to check signals, ~0.6 % of a core alone); every
node reads on the whole second of its clock (the samplers LEAD_S before the hub), so the file is written
once a second for the whole cluster, through a descriptor of the lease directory kept open.

Lifetime: consoles keep a lease each, a file in `--lease-dir` (on the head) whose mtime they renew; the probe
ends by itself once no lease is fresher than `--lease-timeout` (also when its last console was SIGKILLed or
lost its SSH session), and after `--max-age` at the latest. A lease dated in the future counts for nobody.
One probe per lease directory: the hub takes an exclusive lock in it; a second one says so and ends. The
lease directory must be this user's own (backend/safe_paths.py, inlined: a real directory, not a link,
writable by no one else; created 0700 when missing); every file in it is opened with O_NOFOLLOW.

The job's lines (`ULTRA_CONSOLE_GPU {json}`): `hello` (the hub's pid and host) or `duplicate` or `bye` (why
not). The file: `{"k": "readings", "pid", "host", "t", "leases": [...], "nodes": {node id: reading}, "bye"?}`,
a reading `{"t", "g": [[index, util % or -1, MiB used, MiB total, W or -1, °C or -1, [[pid, MiB], ...]],
...] | "nvml": why not, "c": the sampling process's CPU seconds}`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, TypedDict

from backend.safe_paths import PrivateDir, UnsafePath, exclusive_lock  # inlined on the node

MARK = "ULTRA_CONSOLE_GPU "
NODE_ENV = "ULTRA_CONSOLE_GPU_PROBE_NODE"  # marks a probe actor's process (and names its node)
NAMESPACE = "ultra-console"
LOCK_NAME = "probe.lock"
READINGS_NAME = "readings.json"
LEASE_SUFFIX = ".lease"
FUTURE_SLACK_S = 5.0  # a lease newer than now by more than this was not renewed by a console: it is ignored
RELIST_S = 5.0
READ_S = 1.0  # utilisation and memory this often
PROCS_EVERY_S = 5.0  # power, temperature and the process list this often (or when memory moved)
UTIL_STEP, MEM_STEP_MIB = 5, 256  # what counts as a change worth a reading of its own
MIB = 1 << 20
START_TIMEOUT_S = 60.0
WRITE_GAP_S = 0.2  # the file is replaced at most this often
LEAD_S = 0.1  # the samplers read this long before the hub's whole second: theirs are in when it writes


# One GPU as a reading carries it: index, util % or -1, MiB used, MiB total, W or -1, °C or -1,
# [[pid, MiB], ...].
GpuRow = tuple[int, int, int, int, int, int, list[list[int]]]


class Reading(TypedDict, total=False):
    """One node's reading: `t` and `c` always; `g`, or `nvml` saying why not."""

    t: float
    g: list[GpuRow]
    nvml: str
    c: float


def changed(old: Reading | None, new: Reading) -> bool:
    """Whether `new` says something `old` did not: utilisation or memory moved, a process came or went."""
    old_g, new_g = (old or {}).get("g"), new.get("g")
    if old is None or (old_g is None) != (new_g is None) or len(old_g or ()) != len(new_g or ()):
        return True
    return any(_gpu_moved(a, b) for a, b in zip(old_g or (), new_g or (), strict=True))


def _gpu_moved(a: GpuRow, b: GpuRow) -> bool:
    """One GPU's reading moved: utilisation or memory by a step, or its processes changed."""
    return abs(a[1] - b[1]) >= UTIL_STEP or abs(a[2] - b[2]) >= MEM_STEP_MIB or a[6] != b[6]


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(MARK + json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def nvml_module() -> Any:
    """Ray's own vendored pynvml (every Ray node has it), else nvidia-ml-py's `pynvml`."""
    try:
        import ray._private.thirdparty.pynvml as pynvml  # ray: present wherever the probe runs
    except ImportError:
        import pynvml  # type: ignore[no-redef]  # nvidia-ml-py, where Ray vendors none
    return pynvml


def _call(fn: Any, *args: Any) -> Any:
    """One NVML call, or None where the device cannot answer it (NVMLError, or a name this binding lacks)."""
    try:
        return fn(*args)
    except Exception:
        return None


class Nvml:
    """This node's GPUs read through NVML itself (handles kept): a few NVML calls per GPU and second."""

    def __init__(self) -> None:
        self.why = ""
        self.nv: Any = None
        self.handles: list[Any] = []
        self._slow: dict[int, tuple[int, int, list[list[int]]]] = {}
        self._slow_at = -float("inf")
        try:
            nv = nvml_module()
            nv.nvmlInit()
            self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
            self.nv = nv
        except Exception as err:  # no driver, no library: said in every reading, never an end
            self.why = f"NVML did not answer: {type(err).__name__}: {err}"[:200]

    def _procs(self, handle: Any) -> list[list[int]]:
        found: dict[int, int] = {}
        for fn in (
            self.nv.nvmlDeviceGetComputeRunningProcesses,
            self.nv.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            for p in _call(fn, handle) or ():
                used = getattr(p, "usedGpuMemory", None)
                found[int(p.pid)] = int(used) // MIB if isinstance(used, int) and used >= 0 else -1
        return [[pid, mib] for pid, mib in sorted(found.items())]

    def _read_slow(self, i: int, handle: Any) -> tuple[int, int, list[list[int]]]:
        power = _call(self.nv.nvmlDeviceGetPowerUsage, handle)
        temp = _call(self.nv.nvmlDeviceGetTemperature, handle, getattr(self.nv, "NVML_TEMPERATURE_GPU", 0))
        return (
            -1 if power is None else round(power / 1000),
            -1 if temp is None else int(temp),
            self._procs(handle),
        )

    def gpus(self, last: list[GpuRow] | None) -> list[GpuRow]:
        """Every GPU now: utilisation and memory read, the slow part re-read when due or memory moved."""
        now = time.monotonic()
        due = now - self._slow_at >= PROCS_EVERY_S
        rows: list[GpuRow] = []
        for i, handle in enumerate(self.handles):
            util = _call(self.nv.nvmlDeviceGetUtilizationRates, handle)
            mem = _call(self.nv.nvmlDeviceGetMemoryInfo, handle)
            used, total = (int(mem.used) // MIB, int(mem.total) // MIB) if mem is not None else (-1, -1)
            before = last[i] if last and i < len(last) else None
            if due or i not in self._slow or (before is not None and abs(before[2] - used) >= MEM_STEP_MIB):
                self._slow[i] = self._read_slow(i, handle)
            power, temp, procs = self._slow[i]
            rows.append((i, -1 if util is None else int(util.gpu), used, total, power, temp, procs))
        if due:
            self._slow_at = now
        return rows


def next_read_at(now: float, lead: float = 0.0) -> float:
    """The next instant (epoch seconds) to read NVML: a whole READ_S of the wall clock, `lead` before it, at
    least half a period after `now`. Every node of a cluster (NTP keeps their clocks within milliseconds)
    reads in the same instant, so the hub has them all when it writes: one write a second, however many
    nodes; a node whose clock is off is written on its own, WRITE_GAP_S after the last write."""
    return (math.floor((now + lead + READ_S / 2) / READ_S) + 1) * READ_S - lead


class NodeSampler:
    """One node's readings: NVML every READ_S, sent when something changed and at least every `interval`."""

    def __init__(self) -> None:
        self.nvml = Nvml()
        self._sent: Reading | None = None
        self._sent_at = -float("inf")
        self._last: list[GpuRow] | None = None

    def read(self) -> Reading:
        out: Reading = {"t": round(time.time(), 3)}
        if self.nvml.nv is None:
            out["nvml"] = self.nvml.why
        else:
            self._last = out["g"] = self.nvml.gpus(self._last)
        times = os.times()
        out["c"] = round(times.user + times.system, 2)
        return out

    def due(self, reading: Reading, interval: float) -> bool:
        """Whether `reading` goes out: a change since the last one sent, or `interval` without one."""
        now = time.monotonic()
        if now - self._sent_at >= interval - READ_S / 4 or changed(self._sent, reading):  # a tick's jitter
            self._sent, self._sent_at = reading, now
            return True
        return False

    def stream(self, interval: float) -> Iterator[Reading]:
        """The node's readings for ever (one streaming call: a reading costs one report, not a task), read
        LEAD_S before the hub's own."""
        while True:
            reading = self.read()
            if self.due(reading, interval):
                yield reading
            time.sleep(max(0.0, next_read_at(time.time(), LEAD_S) - time.time()))


def fresh_leases(lease_dir: str, timeout_s: float) -> list[str]:
    """Names of the leases renewed within `timeout_s`: regular files only (a link counts for nobody), and
    none dated more than FUTURE_SLACK_S ahead of now (it would keep the probe alive without a console)."""
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
            st = os.lstat(os.path.join(lease_dir, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and -FUTURE_SLACK_S <= now - st.st_mtime <= timeout_s:
            found.append(name[: -len(LEASE_SUFFIX)])
    return sorted(found)


def take_lock(lease_dir: str) -> IO[bytes] | None:
    """The probe's exclusive lock (kept open while it runs), or None when another probe holds it. The lease
    directory is proven this user's own first (UnsafePath, in one line, when it is not)."""
    return exclusive_lock(lease_dir, LOCK_NAME)


def hub_name(lease_dir: str) -> str:
    """The hub actor's name: one per lease directory (two users' consoles on one head keep one each)."""
    return "gpu-probe-" + hashlib.sha256(lease_dir.encode()).hexdigest()[:16]


class Options(TypedDict):
    node_id: str
    lease_dir: str
    lease_timeout: float
    interval: float
    max_age: float


class Hub:
    """The probe on the head: samples the head, relays every other node's sampler, writes the file."""

    def __init__(self) -> None:
        self.opts: Options | None = None
        self.readings: dict[str, Reading] = {}
        self.lock: IO[bytes] | None = None
        self.news = threading.Event()
        self.guard = threading.Lock()
        self.leases: list[str] = []
        self._written_at = -float("inf")
        self._dir: PrivateDir | None = None  # the lease directory, proven once, kept open while the hub runs
        self._sampler: Any = None

    def start(self, opts: Options) -> Iterator[dict[str, object]]:
        """Take the lock and sample in this actor's main thread, for as long as the hub runs: a streaming
        call whose first item is what the job prints (hello, duplicate or bye). Why in the main thread: an
        actor whose main thread idles in Ray's task loop wakes 100 times a second to check for signals
        (~0.6 % of a core alone, measured); one busy in a task, as every sampler is, does not."""
        if self.opts is not None:
            yield {"k": "duplicate", "why": "this lease directory's GPU probe runs already"}
            return
        try:
            self.lock = take_lock(opts["lease_dir"])
        except (UnsafePath, OSError) as err:
            yield {"k": "bye", "why": f"lease directory refused: {err}"[:300]}
            self._end(after_s=1.0)  # once the answer is out
            return
        if self.lock is None:
            yield {"k": "duplicate", "why": "another GPU probe holds this lease directory's lock"}
            self._end(after_s=1.0)
            return
        self.opts = opts
        yield {"k": "hello", "pid": os.getpid(), "host": socket.gethostname(), "node": opts["node_id"]}
        self._main()

    def _put(self, node: str, reading: Reading) -> None:
        with self.guard:
            self.readings[node] = reading
        self.news.set()

    def _relay(self, node: str, actor: Any, actors: dict[str, Any]) -> None:
        """Every reading of one node's sampler until it ends (its node died); then forget it (re-made at the
        next listing if the node is alive)."""
        import ray  # ray: in the actor's process already

        assert self.opts is not None
        try:
            for ref in actor.stream.options(num_returns="streaming").remote(self.opts["interval"]):
                self._put(node, ray.get(ref))
        except Exception as err:
            self._put(
                node, {"t": round(time.time(), 3), "nvml": f"sampler lost: {type(err).__name__}", "c": -1}
            )
        if actors.get(node) is actor:
            actors.pop(node, None)

    def _samplers(self, actors: dict[str, Any]) -> None:
        """A sampler actor pinned to every alive node that has none (the head samples itself)."""
        import ray  # ray: in the actor's process already
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        assert self.opts is not None
        alive = {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}
        if self._sampler is None:  # the class made remote once, not at every listing
            self._sampler = ray.remote(num_cpus=0, num_gpus=0, max_restarts=0)(NodeSampler)
        for node in sorted(alive - set(actors) - {self.opts["node_id"]}):
            actor = actors[node] = self._sampler.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                enable_task_events=False,
                runtime_env={"env_vars": {NODE_ENV: node}},
            ).remote()
            threading.Thread(target=self._relay, args=(node, actor, actors), daemon=True).start()

    def _write(self, bye: str = "") -> None:
        assert self.opts is not None
        self.news.clear()
        self._written_at = time.monotonic()
        with self.guard:
            body: dict[str, object] = {
                "k": "readings",
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "t": round(time.time(), 3),
                "leases": self.leases,
                "nodes": dict(self.readings),
            }
        if bye:
            body["bye"] = bye
        try:
            if self._dir is None:
                self._dir = PrivateDir(self.opts["lease_dir"])
            self._dir.replace(READINGS_NAME, json.dumps(body, separators=(",", ":")).encode())
        except (UnsafePath, OSError) as err:
            sys.stderr.write(f"GPU probe: readings not written: {err}\n")

    def _ended(self, started: float) -> str:
        """Why the probe ends now ("" while a console holds a fresh lease and it is young enough)."""
        assert self.opts is not None
        self.leases = fresh_leases(self.opts["lease_dir"], self.opts["lease_timeout"])
        age = time.monotonic() - started
        if not self.leases and age > self.opts["lease_timeout"]:
            return f"no console renewed a lease in {self.opts['lease_timeout']:.0f} s"
        if age > self.opts["max_age"]:
            return f"lifetime of {self.opts['max_age']:.0f} s reached (a console starts a fresh probe)"
        return ""

    def _main(self) -> None:
        assert self.opts is not None
        head = NodeSampler()
        actors: dict[str, Any] = {}
        started = listed_at = checked_at = time.monotonic()
        listed_at -= RELIST_S
        why = ""
        while not why:
            if time.monotonic() - listed_at >= RELIST_S:
                listed_at = time.monotonic()
                self._samplers(actors)
            reading = head.read()
            if head.due(reading, self.opts["interval"]):
                self._put(self.opts["node_id"], reading)
            if time.monotonic() - checked_at >= self.opts["interval"]:
                checked_at = time.monotonic()
                why = self._ended(started)
            if self.news.is_set():
                self._write()  # the head's reading with every sampler's of this second (they read LEAD_S ago)
            if not why:
                self._until(next_read_at(time.time()))
        self._write(bye=why)
        self._end()

    def _until(self, tick: float) -> None:
        """Wait for the next read at `tick`: a relayed reading that comes well before it (a node whose clock
        is off, a late one) is written WRITE_GAP_S after the last write; one that comes within the samplers'
        lead of it waits for that tick's write (one write a second for the whole cluster)."""
        while (left := tick - time.time()) > 0:
            if left <= 2 * LEAD_S:
                time.sleep(left)
                return
            if self.news.wait(left - 2 * LEAD_S):
                time.sleep(max(0.0, WRITE_GAP_S - (time.monotonic() - self._written_at)))
                if tick - time.time() > 2 * LEAD_S:
                    self._write()

    def _end(self, after_s: float = 0.0) -> None:
        """The hub goes (its samplers with it: they are its own actors); the name is free for the next."""
        import ray  # ray: in the actor's process already

        time.sleep(after_s)
        if self.lock is not None:
            self.lock.close()
        try:
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        except Exception:
            os._exit(0)


def _options(argv: list[str]) -> Options | None:
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
    if not opts["--lease-dir"] or not opts["--node-id"]:
        return None
    return Options(
        node_id=opts["--node-id"],
        lease_dir=opts["--lease-dir"],
        lease_timeout=float(opts["--lease-timeout"]),
        interval=float(opts["--interval"]),
        max_age=float(opts["--max-age"]),
    )


def main(argv: list[str]) -> int:
    """The job: start the hub on the head (or find this lease directory's), print what it said, end."""
    opts = _options(argv)
    if opts is None:
        emit({"k": "bye", "why": "usage: --gpu-probe --node-id=ID --lease-dir=DIR"})
        return 2
    # ray: a slow import, paid only by the mode that needs it
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False, logging_level=40)  # logging.ERROR
    if ray.get_runtime_context().get_node_id() == opts["node_id"] and lock_held(opts["lease_dir"]):
        emit({"k": "duplicate", "why": "another GPU probe holds this lease directory's lock"})
        return 0
    hub: Any = (
        ray.remote(num_cpus=0, num_gpus=0, max_restarts=0)(Hub)
        .options(
            name=hub_name(opts["lease_dir"]),
            lifetime="detached",
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(opts["node_id"], soft=False),
            enable_task_events=False,
            runtime_env={"env_vars": {NODE_ENV: opts["node_id"]}},
        )
        .remote()
    )
    said = first_answer(hub.start.options(num_returns="streaming").remote(opts))
    emit(said)
    return 0


def lock_held(lease_dir: str) -> bool:
    """Whether a running hub holds the lease directory's lock: the job (on the head) looks before it asks
    the hub, whose main thread is its sampling loop once it runs (a second start would wait behind it)."""
    try:
        handle = take_lock(lease_dir)
    except (UnsafePath, OSError):
        return False  # the hub says why
    if handle is None:
        return True
    handle.close()
    return False


def first_answer(stream: Any) -> dict[str, object]:
    """The hub's first streamed item (hello, duplicate or bye), waited for at most START_TIMEOUT_S."""
    import ray  # ray: initialised by main

    box: list[dict[str, object]] = []

    def take() -> None:
        try:
            box.append(ray.get(next(stream)))
        except Exception as err:
            box.append({"k": "bye", "why": f"the probe did not start: {type(err).__name__}: {err}"[:300]})

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    taker.join(START_TIMEOUT_S)
    return box[0] if box else {"k": "bye", "why": f"the probe did not answer in {START_TIMEOUT_S:.0f} s"}


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # past this point only Ray's driver teardown runs: the job's end must not depend on it
