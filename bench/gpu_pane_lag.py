"""How far the GPU pane lags behind the GPU: the console's own probe beside Ray's reporter (and miles'
streams), in one run.

The pane draws the rows `fleet_rows()` builds from what backend.cluster.telemetry.TelemetryPoller returns;
here the same poller is driven the way the app's telemetry worker drives it (once a second, and at once when
the probe has a new reading) on a real loopback Ray cluster started here (inside `unshare -n`). GPU 0 of the
head is flipped between idle and busy every `--gap` seconds; the lag of one flip is the time from the change
to the first pane rows that show it.

* default (fake NVML): the fake GPU's utilisation is flipped between 3 % and 97 % by its override file, which
  every reader (Ray's reporter, the probe) sees at its next NVML read; the change happens when the file is
  written. miles' streams are measured too, as miles' collector writes
  them (samples handed over at once, and in 5 s batches).
* `--real-nvml` (a machine with a GPU, torch, nvidia-ml-py and Ray): a torch matmul loop is switched on and
  off on GPU 0; the change happens when this bench's own NVML sampler (10 Hz) first sees utilisation cross 50
  %. Also checked there: no probe process shows in NVML's
  process list (the probe never creates a CUDA context).

Both modes print the probe's CPU cost per node (its hub actor on the head, its sampler actors elsewhere, and
any job of it still running, with Ray's JobSupervisor), measured with psutil over the run; `--old-probe FILE`
runs the probe as it was before (a job that kept running, read through its log tail) beside it, for both
ratios in one run. Target: probe CPU <= 1 % of a core per node; lag median <= 1 s, max <= 1.5 s.
Usage: python bench/gpu_pane_lag.py [--flips 8] [--gap 12] [--real-nvml] [--old-probe FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import run_on_fresh_cluster  # noqa: E402

APP_POLL_S = 1.0  # console.workers.TELEMETRY_INTERVAL_S
LOW, HIGH = 3, 97
BUSY = 50.0  # real NVML: busy at or above this utilisation
PROBE, REPORTER, OLD = "GPU probe", "Ray reporter", "old GPU probe (job log tail)"
LOAD = """
import os, sys, time, torch
flag = sys.argv[1]
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
while True:
    if os.path.exists(flag):
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    else:
        time.sleep(0.01)
"""


@dataclass
class MilesWriter:
    """miles' sampler + collector for one node: sample every 1 s, hand samples over every `push_s`, flush
    every `flush_s` to the hour partition, in miles' line encoding."""

    util: list[int]
    dump: Path
    push_s: float
    flush_s: float = 1.0
    node: str = "127.0.0.1"
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        pending: list[dict[str, object]] = []  # sampled, not handed over yet
        handed: list[dict[str, object]] = []  # at the collector, not flushed yet
        next_sample = next_push = next_flush = time.time()
        while not self.stop.is_set():
            now = time.time()
            if now >= next_sample:
                pending.append(
                    {
                        "ts": now,
                        "node": self.node,
                        "gpu": 0,
                        "util": self.util[0],
                        "mem_mb": 1000,
                        "power_w": 300,
                    }
                )
                next_sample += 1.0
            if now >= next_push:
                handed += pending
                pending = []
                next_push += self.push_s
            if now >= next_flush:
                if handed:
                    hour = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%d_%H")
                    path = self.dump / "dashboard" / "gpu_util" / f"{hour}.jsonl"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with path.open("a") as fh:
                        fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in handed))
                    handed = []
                next_flush += self.flush_s
            time.sleep(0.02)


async def pane(poller: Any, node_id: str, log: list[tuple[float, float | None]], done: asyncio.Event) -> None:
    """The app's telemetry worker and the fleet's rows: poll, note what the head's GPU 0 shows and when, wait
    for the next second or the probe's next reading (console.workers._telemetry)."""
    from console.widgets.gpu_fleet import fleet_rows

    while not done.is_set():
        tick = time.monotonic()
        snap = await poller.poll_once()
        rows = fleet_rows(snap, time.time())
        index = next((i for i, n in enumerate(snap.nodes) if n.node_id == node_id), None)
        row = rows[index] if index is not None else None
        log.append((time.time(), row.gpus[0].util if row and row.gpus and not row.stale else None))
        await poller.wait_next(max(0.1, APP_POLL_S - (time.monotonic() - tick)))


class Nvml:
    """The bench's own view of GPU 0 (real NVML, 10 Hz): when utilisation crossed the busy line."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.log: list[tuple[float, float]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.log.append((time.time(), float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)))
            time.sleep(0.1)

    def pids(self) -> set[int]:
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        return {int(p.pid) for p in procs}


def probe_processes(head: str, nodes: list[str]) -> dict[str, list[Any]]:
    """This cluster's probe processes on this host, by part: its hub actor (on the head), its sampler actors
    (one per other node), and any job still running for it (the starting job's driver, the JobSupervisor of
    a job). Only this cluster's `nodes`: another cluster on the same machine (a test run) has probes too."""
    import psutil

    found: dict[str, list[Any]] = {"hub": [], "samplers": [], "job": [], "old": [], "idle": []}
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        try:
            if "--old-gpu-probe" in cmd:
                continue  # the old probe's (old_probe_processes)
            mine = "--gpu-probe" in cmd and f"--node-id={head}" in cmd
            if "python3 -c" in cmd and mine and not cmd.startswith("/bin/sh"):
                found["job"] += [
                    proc,
                    *(p for p in proc.parents() if "JobSupervisor" in " ".join(p.cmdline())),
                ]
            elif (node := proc.environ().get("ULTRA_CONSOLE_GPU_PROBE_NODE")) in nodes:
                env = proc.environ()
                if "BENCH_OLD_PROBE" in env:
                    found["old"].append(proc)
                elif cmd.startswith(("ray::Hub", "ray::NodeSampler")):
                    found["hub" if node == head else "samplers"].append(proc)
                else:
                    found["idle"].append(proc)  # a worker Ray keeps for the probe's runtime env
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def old_probe_processes(head: str) -> list[Any]:
    """The old probe on the head (a job that kept running, `--old-probe`): its driver, its JobSupervisor."""
    import psutil

    found: list[Any] = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if "--old-gpu-probe" in cmd and f"--node-id={head}" in cmd and not cmd.startswith("/bin/sh"):
                found += [proc, *(p for p in proc.parents() if "JobSupervisor" in " ".join(p.cmdline()))]
    return found


class CpuMeter:
    """CPU seconds of each process, read every second: a process that ends keeps its last reading."""

    def __init__(self, procs: dict[str, list[Any]]) -> None:
        self.procs = procs
        self.first = {id(p): cpu_seconds([p]) for ps in procs.values() for p in ps}
        self.last = dict(self.first)

    async def run(self) -> None:
        while True:
            for ps in self.procs.values():
                for p in ps:
                    if p.is_running():
                        self.last[id(p)] = max(self.last[id(p)], cpu_seconds([p]))
            await asyncio.sleep(1.0)

    def used(self, part: str) -> float:
        return sum(self.last[id(p)] - self.first[id(p)] for p in self.procs[part])


class OldProbe:
    """The old probe's readings as the old console read them: its job's log, followed through Ray's tail."""

    def __init__(self) -> None:
        self.readings: dict[str, Any] = {}
        self.updated = asyncio.Event()

    async def follow(self, client: Any, job_id: str) -> None:
        from backend.cluster.gpu_probe import parse_line, parse_reading

        async for line in client.follow_log(job_id):
            obj = parse_line(line)
            reading = parse_reading(obj) if obj is not None and obj.get("k") == "s" else None
            if reading is not None:
                self.readings[reading.node_id] = reading
                self.updated.set()


async def start_old_probe(client: Any, source: Path, head: str) -> tuple[OldProbe, asyncio.Task[None], Path]:
    """The old probe's job (the script before this change, from `--old-probe FILE`) beside the new one, with a
    lease this bench keeps fresh, so both are measured in one run on one GPU."""
    from backend.cluster.node_job import script_source

    lease_dir = Path(tempfile.mkdtemp(prefix="old-probe-"))
    (lease_dir / "bench.lease").write_text("x")
    args = ["--gpu-probe", "--old-gpu-probe", f"--node-id={head}", f"--lease-dir={lease_dir}"]
    # its sampler actors marked apart from the new probe's (the fake NVML still knows them as the probe's)
    code = script_source(source).replace("{NODE_ENV: node}", '{NODE_ENV: node, "BENCH_OLD_PROBE": "1"}')
    sid = await client.submit(
        {
            "entrypoint": shlex.join(["python3", "-c", code, *args]),
            "submission_id": f"bench-old-gpu-probe-{int(time.time())}",
        }
    )
    old = OldProbe()
    return old, asyncio.create_task(old.follow(client, sid)), lease_dir


def cpu_seconds(procs: list[Any]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except Exception:
            pass
    return total


async def measure(rc: Any, flips: int, gap: float, real: bool, old_source: Path | None) -> None:
    from backend.cluster.dashboard import JobInfo, RayClient
    from backend.cluster.gpu_probe import GpuProbe
    from backend.cluster.telemetry import TelemetryPoller

    head = rc.node_ids[0]
    util = [LOW]
    writers: dict[str, MilesWriter] = {}
    nvml: Nvml | None = None
    load: subprocess.Popen[str] | None = None
    flag = Path(tempfile.mkdtemp(prefix="pane-lag-")) / "busy"
    override = rc.fake_gpu_dir / head / "override.json"
    if real:
        nvml = Nvml()
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(flag)], stdout=subprocess.PIPE, text=True)
        assert load.stdout is not None
        load.stdout.readline()
    else:
        override.parent.mkdir(parents=True, exist_ok=True)
        override.write_text(json.dumps({"0": {"util": LOW}}))
        tmp = flag.parent
        writers = {
            "miles (samples handed over at once)": MilesWriter(util, tmp / "now", push_s=1.0),
            "miles (GpuSampler: batches every 5 s)": MilesWriter(util, tmp / "batched", push_s=5.0),
        }
        for w in writers.values():
            threading.Thread(target=w.run, daemon=True).start()
    async with RayClient(rc.address, timeout=30) as client:
        probe = GpuProbe(client)
        probe_task = asyncio.create_task(probe.run())
        while head not in probe.fresh(time.time()):
            await asyncio.sleep(0.2)
        print(f"probe {probe.job_id} reading every node", flush=True)
        pollers = {
            REPORTER: TelemetryPoller(client, interval_s=APP_POLL_S),
            PROBE: TelemetryPoller(client, interval_s=APP_POLL_S),
        }
        pollers[PROBE].use_probe(probe)
        old_task: asyncio.Task[None] | None = None
        if old_source is not None:
            old, old_task, old_leases = await start_old_probe(client, old_source, head)
            pollers[OLD] = TelemetryPoller(client, interval_s=APP_POLL_S)
            pollers[OLD].use_probe(old)  # type: ignore[arg-type]  # readings + updated: all the poller reads
            while head not in old.readings:
                await asyncio.sleep(0.2)
        for name, w in writers.items():
            pollers[name] = TelemetryPoller(client, interval_s=APP_POLL_S)
            pollers[name].watch_job(JobInfo(entrypoint=f"python3 train.py --dump-details {w.dump}"))
        done = asyncio.Event()
        shown: dict[str, list[tuple[float, float | None]]] = {name: [] for name in pollers}
        panes = [
            asyncio.create_task(pane(poller, head, shown[name], done)) for name, poller in pollers.items()
        ]
        await asyncio.sleep(5)  # the starting job's driver and supervisor are gone
        procs = probe_processes(head, list(rc.node_ids))
        procs["old_samplers"] = procs.pop("old")
        procs["old"] = old_probe_processes(head) if old_source is not None else []
        meter = CpuMeter(procs)
        meter_task = asyncio.create_task(meter.run())
        wall0 = time.monotonic()
        await asyncio.sleep(gap)  # every pane shows idle first
        phases = random.Random(7)
        flipped_at: list[tuple[float, bool]] = []
        for n in range(flips):
            await asyncio.sleep(
                phases.uniform(0.0, APP_POLL_S)
            )  # flips land anywhere in the pane's poll cycle
            busy = n % 2 == 0
            util[0] = HIGH if busy else LOW
            if real:
                flag.touch() if busy else flag.unlink(missing_ok=True)
            else:
                override.write_text(json.dumps({"0": {"util": util[0]}}))
            flipped_at.append((time.time(), busy))
            await asyncio.sleep(gap)
            if old_source is not None:
                (old_leases / "bench.lease").touch()
        wall = time.monotonic() - wall0
        meter_task.cancel()
        cost = {part: 100 * meter.used(part) / wall for part in procs}
        holders = nvml.pids() if nvml is not None else set()
        done.set()
        await asyncio.gather(*panes)
        for task in (probe_task, old_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    for w in writers.values():
        w.stop.set()
    if load is not None:
        load.kill()
    lags: dict[str, list[float]] = {name: [] for name in pollers}
    for n, (commanded, busy) in enumerate(flipped_at):
        until = flipped_at[n + 1][0] if n + 1 < len(flipped_at) else float("inf")
        changed = commanded
        if nvml is not None:
            changed = next(
                (t for t, u in nvml.log if commanded <= t < until and (u >= BUSY) == busy), float("nan")
            )
        line = [f"flip {n + 1}/{flips} to {'busy' if busy else 'idle'}:"]
        for name, log in shown.items():
            at = next(
                (t for t, u in log if changed <= t < until and u is not None and (u >= BUSY) == busy), None
            )
            if at is None:
                line.append(f"{name}: never shown")
                continue
            lags[name].append(at - changed)
            line.append(f"{name}: {at - changed:.1f} s")
        print(" ".join(line[:1]) + " " + ", ".join(line[1:]), flush=True)
    report(lags, flips, gap, real)
    report_cpu(procs, cost, wall, len([i for i in range(len(rc.node_ids)) if i not in rc.dead]))
    if nvml is not None:
        mine = {p.pid for ps in procs.values() for p in ps} & holders
        print(f"probe processes in NVML's process list (a CUDA context): {sorted(mine) or 'none'}")
        nvml.stop.set()


def report_cpu(procs: dict[str, list[Any]], cost: dict[str, float], wall: float, n_nodes: int) -> None:
    """The probe's CPU per node (% of one core): the head's hub (and any job of it still running), each
    other node's sampler; the old probe's (driver + JobSupervisor) beside it when it ran."""
    samplers = (
        f"each sampler actor {cost['samplers'] / len(procs['samplers']):.2f} % ({len(procs['samplers'])} "
        f"on the {n_nodes - 1} other node(s))"
        if procs["samplers"]
        else "no other node"
    )
    head = cost["hub"] + cost["job"]
    print(
        f"\nprobe CPU over {wall:.0f} s (% of one core): {samplers}; on the head its hub actor "
        f"{cost['hub']:.2f} % + a job of it still running {cost['job']:.2f} % = {head:.2f} % "
        f"(target <= 1 % per node: {'met' if head <= 1.0 else 'NOT met'})"
    )
    if procs["idle"]:
        print(
            f"idle workers Ray keeps for the probe's runtime env: {cost['idle']:.2f} % ({len(procs['idle'])})"
        )
    if procs["old"]:
        print(
            f"old probe on the head (its driver + Ray's JobSupervisor): {cost['old']:.2f} % "
            f"({cost['old'] / max(head, 1e-9):.1f}x the new)"
        )


def report(lags: dict[str, list[float]], flips: int, gap: float, real: bool) -> None:
    base = statistics.median(lags[REPORTER]) if lags[REPORTER] else float("nan")
    truth = "NVML (10 Hz) first showed it" if real else "the fake GPU changed"
    print(f"\nGPU pane lag behind the change (from when {truth} to the pane rows showing it)")
    for name, values in lags.items():
        missed = flips - len(values)
        note = f"; {missed} flip(s) not shown within {gap:.0f} s" if missed else ""
        if not values:
            print(f"  {name:<40} never shown{note}")
            continue
        med = statistics.median(values)
        print(
            f"  {name:<40} median {med:4.1f} s  max {max(values):4.1f} s  ({med / base:.2f}x Ray's reporter)"
            + note
        )
    probe = lags[PROBE]
    if probe:
        med, worst = statistics.median(probe), max(probe)
        ok = med <= 1.0 and worst <= 1.5 and len(probe) == flips
        print(
            f"target (probe median <= 1 s, max <= 1.5 s, every flip shown): median {med:.2f} s, max "
            f"{worst:.2f} s, {med / base:.2f}x Ray's reporter: {'met' if ok else 'NOT met'}"
        )
    if lags.get(OLD) and probe:
        print(
            f"new probe against the old one, same run: median "
            f"{statistics.median(probe) / statistics.median(lags[OLD]):.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--flips", type=int, default=8)
    parser.add_argument(
        "--gap",
        type=float,
        default=12.0,
        help="seconds between flips (more than Ray's worst case: 5 s report + 2 s cache + polls)",
    )
    parser.add_argument(
        "--real-nvml", action="store_true", help="a real GPU: torch load on GPU 0, no fake NVML"
    )
    parser.add_argument(
        "--old-probe",
        type=Path,
        help="the probe job's script before this change (git show REV:backend/cluster/gpu_probe_job.py): "
        "run beside the new one, its CPU and lag measured in the same run",
    )
    args = parser.parse_args()
    gpus = 8
    if args.real_nvml:
        try:
            import pynvml
            import ray  # noqa: F401

            pynvml.nvmlInit()
            gpus = pynvml.nvmlDeviceGetCount()
        except Exception as err:
            sys.exit(f"--real-nvml needs a GPU, nvidia-ml-py and Ray 2.60 here: {type(err).__name__}: {err}")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")

    async def bench(rc: Any) -> None:
        await measure(rc, args.flips, args.gap, args.real_nvml, args.old_probe)

    run_on_fresh_cluster(0 if args.real_nvml else 1, bench, gpus=gpus, fake_gpus=not args.real_nvml)


if __name__ == "__main__":
    main()
