"""miles' live dashboard streams (`--use-miles-dashboard`), written the way miles/dashboard writes them.

Why: the console reads `{dump_details}/dashboard/` (GPU samples every second, per-process GPU memory,
metric records, phases) before Ray's slower reporter; the simulator must produce exactly miles' files so
that reader is tested against miles' layout, not ours. Processes as in miles: the driver creates the named
actor `miles_dashboard_collector` (class `DashboardCollector`) on its node, which owns the store and
flushes every `--dashboard-flush-interval` seconds; one `GpuSampler` actor per GPU node samples its node's
(fake) NVML every `--dashboard-gpu-sample-interval` seconds and the per-process memory every 5 s.
One deliberate difference: miles' sampler hands its buffer over every 5 s whatever the flush interval; here
it hands over at the flush interval when that is shorter, so a 1 s flush gives ~1 s old files.

Layout (miles' store.py): `meta.json` (indent=1), flat `metrics.jsonl`, hour-partitioned (UTC)
`gpu_util/`, `gpu_processes/`, `phases/` as `YYYYMMDD_HH.jsonl` (phases by end hour, open markers by start
hour), `lane_catalog.json`; one `json.dumps(record, separators=(",", ":"))` line per record (NaN as `NaN`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.demo.simtrainer.args import SimArgs
from backend.demo.simtrainer.fakegpu.fakenvml import fake_gpus

if TYPE_CHECKING:
    from ray.actor import ActorHandle

COLLECTOR_NAME = "miles_dashboard_collector"
PARTITIONED = ("gpu_util", "gpu_processes", "phases", "engine_series")  # miles store.py: hour partitions
FLAT = ("metrics",)
Record = dict[str, object]  # one JSON line of a stream, as miles' store writes it
PROCESS_SAMPLE_S = 5.0
SAMPLER_PUSH_S = 5.0


@dataclass
class GpuUtilRecord:
    ts: float
    node: str
    gpu: int
    util: int
    mem_mb: int
    power_w: int


@dataclass
class GpuProcessSample:
    ts: float
    node: str
    gpu: int
    pid: int
    name: str
    mem_mb: int


@dataclass
class MetricsRecord:
    ts: float
    step_key: str | None
    step: int | None
    metrics: dict[str, float | int]


@dataclass
class PhaseEvent:
    name: str
    t0: float
    t1: float  # -1.0 while open
    node: str
    gpus: list[int]
    rank: int
    role: str


def _record_time(stream: str, rec: Record) -> float:
    """Which hour a record is filed under: a phase's end (its start while open), any other record's `ts`."""
    ts = (rec["t0"] if rec["t1"] == -1.0 else rec["t1"]) if stream == "phases" else rec["ts"]
    return float(ts) if isinstance(ts, int | float) else 0.0


def hour_key(ts: float) -> str:
    return time.strftime("%Y%m%d_%H", time.gmtime(ts))


class DashboardStore:
    """The write side of miles' MetricStore: buffered records, appended to their stream files on flush."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._buffers: dict[str, list[Record]] = {s: [] for s in (*FLAT, *PARTITIONED)}
        self._lanes: dict[str, dict[str, list[object]]] = {}
        self._lock = threading.Lock()
        # One flush at a time: the final flush (close) must not return while the periodic one still writes.
        self._flush_lock = threading.Lock()

    def write_meta(self, run_name: str, start_ts: float, args: Record) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        meta = {"run_name": run_name, "start_ts": start_ts, "args": args, "schema_version": 1}
        (self.root / "meta.json").write_text(json.dumps(meta, indent=1))

    def append(self, stream: str, record: Record) -> None:
        with self._lock:
            self._buffers[stream].append(record)

    def flush(self) -> int:
        """Append every buffered record to its file; returns how many were written."""
        with self._flush_lock:
            return self._flush()

    def _flush(self) -> int:
        with self._lock:
            buffers = {k: v for k, v in self._buffers.items() if v}
            self._buffers = {s: [] for s in self._buffers}
        self.root.mkdir(parents=True, exist_ok=True)
        self._merge_catalog(buffers.get("phases", []))
        written = 0
        for stream, records in buffers.items():
            groups: dict[Path, list[Record]] = {}
            for rec in records:
                if stream in FLAT:
                    path = self.root / f"{stream}.jsonl"
                else:
                    path = self.root / stream / f"{hour_key(_record_time(stream, rec))}.jsonl"
                groups.setdefault(path, []).append(rec)
            for path, group in sorted(groups.items()):
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in group))
                written += len(group)
        return written

    def _merge_catalog(self, phases: list[Record]) -> None:
        """`lane_catalog.json`: train ranks and roles per
        `<node>:<gpu>` lane, rewritten atomically on change."""
        dirty = False
        for ev in phases:
            if ev["role"] != "train":
                continue
            gpus = ev["gpus"]
            for gpu in gpus if isinstance(gpus, list) else ():
                lane = self._lanes.setdefault(
                    f"{ev['node']}:{gpu}", {"ranks": [], "engine_addrs": [], "roles": []}
                )
                for field, value in (("ranks", ev["rank"]), ("roles", "train")):
                    if value not in lane[field]:
                        lane[field].append(value)
                        dirty = True
        if dirty:
            tmp = self.root / "lane_catalog.json.tmp"
            tmp.write_text(json.dumps({"version": 1, "lanes": self._lanes}))
            os.replace(tmp, self.root / "lane_catalog.json")


class DashboardCollector:
    """miles' collector actor: receives pushes from every process and flushes the store periodically."""

    def __init__(self, dump_details: str, run_name: str, args: Record, flush_s: float) -> None:
        self.store = DashboardStore(Path(dump_details) / "dashboard")
        self.store.write_meta(run_name, time.time(), args)
        self.flush_s = flush_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-flush", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.store.flush()

    def push(self, stream: str, records: list[Record]) -> None:
        for rec in records:
            self.store.append(stream, rec)

    def close(self) -> int:
        """The final synchronous flush of miles' finish_tracking."""
        self._stop.set()
        return self.store.flush()


def _process_name(pid: int) -> str:
    """What NVML's process-name call gives: the process's command (a Ray worker's title), else `pid N`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            first = fh.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        first = ""
    return first or f"pid {pid}"


class GpuSampler:
    """miles' per-node sampler: every `interval` s a `gpu_util` record per GPU of its node's fake NVML, every
    5 s the per-process memory; buffered and handed to the collector in batches."""

    def __init__(self, node: str, node_id: str, interval: float, push_s: float) -> None:
        self.node, self.node_id, self.interval = node, node_id, interval
        self.push_s = min(SAMPLER_PUSH_S, push_s)
        self._buf: dict[str, list[Record]] = {"gpu_util": [], "gpu_processes": []}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._collector: ActorHandle[DashboardCollector] | None = None
        self._thread = threading.Thread(target=self._run, name="dashboard-gpu-sampler", daemon=True)
        self._thread.start()

    def sample_once(self, ts: float, processes: bool) -> None:
        rows = fake_gpus(self.node_id)
        util = [
            asdict(
                GpuUtilRecord(
                    ts,
                    self.node,
                    int(g["index"]),
                    int(g["utilization_gpu"]),
                    int(g["memory_used"]),
                    int(g["power_mw"]) // 1000,
                )
            )
            for g in rows
        ]
        procs = (
            [
                asdict(
                    GpuProcessSample(
                        ts,
                        self.node,
                        int(g["index"]),
                        int(p["pid"]),
                        _process_name(int(p["pid"])),
                        int(p["gpu_memory_usage"]),
                    )
                )
                for g in rows
                for p in g["processes_pids"].values()
            ]
            if processes
            else []
        )
        with self._lock:
            self._buf["gpu_util"].extend(util)
            self._buf["gpu_processes"].extend(procs)

    def _run(self) -> None:
        next_push = time.monotonic() + self.push_s
        next_procs = time.monotonic()
        while not self._stop.is_set():
            due = time.monotonic() >= next_procs
            self.sample_once(time.time(), due)
            if due:
                next_procs = time.monotonic() + PROCESS_SAMPLE_S
            if time.monotonic() >= next_push:
                self.push()
                next_push = time.monotonic() + self.push_s
            self._stop.wait(self.interval)

    def push(self) -> None:
        with self._lock:
            batch, self._buf = self._buf, {"gpu_util": [], "gpu_processes": []}
        if self._collector is None:
            self._collector = find_collector()
            if self._collector is None:
                return
        for stream, records in batch.items():
            if records:
                self._collector.push.remote(stream, records)  # fire and forget, as in miles

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 1)
        self.push()
        if self._collector is not None:  # the last batch has landed before the driver's final flush
            drain(self._collector)


def drain(collector: ActorHandle[DashboardCollector]) -> None:
    """Wait until `collector` has taken every push this process sent it (an actor runs one caller's calls in
    order, so an empty push returning means all before it landed). A deliberate difference from miles, whose
    last pushes can be cut off at exit: the sim's final flush holds every record."""
    # ray: only inside the Ray job (a collector is only ever found there)
    import ray

    ray.get(collector.push.remote("metrics", []), timeout=30)


def find_collector(timeout_s: float = 60.0) -> ActorHandle[DashboardCollector] | None:
    """The named collector actor, waited for up to `timeout_s` like miles' backend; None (said once on
    stderr) if it never appears."""
    # ray: only inside the Ray job (tests/unit import this module without Ray)
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get_actor(COLLECTOR_NAME)
        except ValueError:
            if time.monotonic() > deadline:
                print(
                    f"miles dashboard: collector {COLLECTOR_NAME} not found in {timeout_s:.0f}s; "
                    "this process stops pushing",
                    file=sys.stderr,
                    flush=True,
                )
                return None
            time.sleep(1.0)


class DashboardClient:
    """What a miles process's dashboard tracking backend does: push metric records and phases to the
    named collector (found once; pushes are fire and forget)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._collector: ActorHandle[DashboardCollector] | None = None

    def _push(self, stream: str, record: Record) -> None:
        if not self.enabled:
            return
        if self._collector is None:
            self._collector = find_collector()
            if self._collector is None:  # as in miles: stop trying, never fail the run for the dashboard
                self.enabled = False
                return
        self._collector.push.remote(stream, [record])

    def drain(self) -> None:
        """Wait until the collector has taken every push this client sent (see `drain`)."""
        if self._collector is not None:
            drain(self._collector)

    def metrics(self, metrics: Record) -> None:
        step_key = next((k for k in ("train/step", "eval/step", "rollout/step") if k in metrics), None)
        scalars = {
            k: float(v) if isinstance(v, float) else v
            for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        step = scalars.get(step_key) if step_key else None
        self._push(
            "metrics",
            asdict(
                MetricsRecord(
                    time.time(),
                    step_key,
                    int(step) if step is not None and math.isfinite(step) else None,
                    scalars,
                )
            ),
        )

    def phase(self, event: PhaseEvent) -> None:
        self._push("phases", asdict(event))


def run_args(args: SimArgs) -> Record:
    """miles' curated `meta.json` args (dashboard/args.py): the GPU layout and rollout shape."""
    return {
        "colocate": True,
        "actor_num_nodes": args.actor_num_nodes,
        "actor_num_gpus_per_node": args.actor_num_gpus_per_node,
        "rollout_num_gpus": args.world_size,
        "rollout_batch_size": args.rollout_batch_size,
        "n_samples_per_prompt": args.n_samples_per_prompt,
        "rollout_max_response_len": args.max_response_len,
        "wandb_group": args.wandb_group,
    }
