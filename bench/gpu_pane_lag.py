"""How far the GPU pane lags behind the GPU sampler: miles' own streams against Ray's reporter, in one run.

The pane draws the rows `fleet_rows()` builds from what backend.cluster.telemetry.TelemetryPoller returns,
polled once a second by the app's telemetry worker; here the same poller is polled the same way on a real
loopback Ray cluster (started here, inside `unshare -n`) with fake GPUs, and GPU 0's utilisation is flipped
between 3 % and 97 % every few seconds. The lag of one flip is the time from the sample that first carried the
new value to the first pane rows that show it.

* Ray's reporter: the fake NVML inside Ray's own dashboard agent reads the new value at its next report
  (every 5 s); the node summary is cached 2 s more. The sample is taken at the flip (NVML sees it at once).
* miles' streams, written as miles' collector writes them (`gpu_util/<UTC hour>.jsonl`, one line per sample):
  a sampler here reads the value every 1 s and the collector flushes every 1 s (the plan toggle's
  `--dashboard-flush-interval 1`), in two shapes: samples handed to the collector at once (what the
  simulated trainer does) and, as miles' GpuSampler does, in batches every 5 s.

Target: miles' streams (samples handed over at once) <= 2 s behind the sampler.
Usage: .venv/bin/python bench/gpu_pane_lag.py [--flips 8] [--gap 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import run_on_fresh_cluster  # noqa: E402

APP_POLL_S = 1.0  # console.workers.TELEMETRY_INTERVAL_S
LOW, HIGH = 3, 97


class Gpu:
    """The value the (fake) GPU shows now, and when each value was set."""

    def __init__(self) -> None:
        self.util = LOW
        self.lock = threading.Lock()


@dataclass
class MilesWriter:
    """miles' sampler + collector for one node: sample every 1 s, hand samples over every `push_s`, flush every
    `flush_s` to the hour partition, in miles' line encoding."""

    gpu: Gpu
    dump: Path
    push_s: float
    flush_s: float = 1.0
    node: str = "127.0.0.1"
    stop: threading.Event = field(default_factory=threading.Event)
    first_ts: dict[int, float] = field(default_factory=dict)  # flip number -> ts of its first sample

    def run(self, flip_of: dict[int, int]) -> None:
        pending: list[dict[str, object]] = []  # sampled, not handed over yet
        handed: list[dict[str, object]] = []  # at the collector, not flushed yet
        next_sample = next_push = next_flush = time.time()
        while not self.stop.is_set():
            now = time.time()
            if now >= next_sample:
                with self.gpu.lock:
                    util = self.gpu.util
                flip = flip_of.get(util, -1)
                self.first_ts.setdefault(flip, now)
                pending.append({"ts": now, "node": self.node, "gpu": 0, "util": util, "mem_mb": 1000, "power_w": 300})
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


async def pane(poller, log: list[tuple[float, float | None]], done: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    """The app's telemetry worker and the fleet's rows: poll once a second, note what GPU 0 shows and when."""
    from console.widgets.gpu_fleet import fleet_rows

    while not done.is_set():
        tick = time.monotonic()
        rows = fleet_rows(await poller.poll_once(), time.time())
        head = next((r for r in rows if r.gpus), None)
        log.append((time.time(), head.gpus[0].util if head and head.gpus else None))
        await asyncio.sleep(max(0.0, APP_POLL_S - (time.monotonic() - tick)))


async def measure(rc, flips: int, gap: float  # type: ignore[no-untyped-def]
                  ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from backend.cluster.dashboard import JobInfo, RayClient
    from backend.cluster.telemetry import TelemetryPoller

    head = rc.node_ids[0]
    override = rc.fake_gpu_dir / head / "override.json"
    override.parent.mkdir(parents=True, exist_ok=True)
    override.write_text(json.dumps({"0": {"util": LOW}}))
    gpu = Gpu()
    tmp = Path(tempfile.mkdtemp(prefix="pane-lag-"))
    flip_of: dict[int, int] = {}
    writers = {"miles (samples handed over at once)": MilesWriter(gpu, tmp / "now", push_s=1.0),
               "miles (GpuSampler: batches every 5 s)": MilesWriter(gpu, tmp / "batched", push_s=5.0)}
    threads = [threading.Thread(target=w.run, args=(flip_of,), daemon=True) for w in writers.values()]
    for t in threads:
        t.start()
    lags: dict[str, list[float]] = {"Ray reporter": [], **{name: [] for name in writers}}
    behind_reality: dict[str, list[float]] = {name: [] for name in lags}
    async with RayClient(rc.address, timeout=30) as client:
        pollers = {"Ray reporter": TelemetryPoller(client, interval_s=APP_POLL_S)}
        for name, w in writers.items():
            poller = TelemetryPoller(client, interval_s=APP_POLL_S)
            poller.watch_job(JobInfo(entrypoint=f"python3 train.py --dump-details {w.dump}"))
            pollers[name] = poller
        done = asyncio.Event()
        shown: dict[str, list[tuple[float, float | None]]] = {name: [] for name in pollers}
        panes = [asyncio.create_task(pane(poller, shown[name], done)) for name, poller in pollers.items()]
        await asyncio.sleep(gap)  # everyone shows LOW first
        phases = random.Random(7)
        flipped_at: list[tuple[float, int]] = []
        for flip in range(flips):
            await asyncio.sleep(phases.uniform(0.0, APP_POLL_S))  # flips land anywhere in the pane's poll cycle
            value = HIGH if flip % 2 == 0 else LOW
            flip_of[value] = flip
            with gpu.lock:
                gpu.util = value
            override.write_text(json.dumps({"0": {"util": value}}))
            flipped_at.append((time.time(), value))
            await asyncio.sleep(gap)
        done.set()
        await asyncio.gather(*panes)
    for flip, (flipped, value) in enumerate(flipped_at):
        until = flipped_at[flip + 1][0] if flip + 1 < len(flipped_at) else float("inf")
        line = [f"flip {flip + 1}/{flips} to {value:>2}%:"]
        for name, log in shown.items():
            at = next((t for t, util in log if flipped <= t < until and util == value), None)
            if at is None:
                line.append(f"{name}: never shown")
                continue
            sampled = flipped if name == "Ray reporter" else writers[name].first_ts.get(flip, flipped)
            lags[name].append(at - sampled)
            behind_reality[name].append(at - flipped)
            line.append(f"{name}: {at - flipped:.1f} s")
        print(" ".join(line[:1]) + " " + ", ".join(line[1:]), flush=True)
    for w in writers.values():
        w.stop.set()
    return lags, behind_reality


def report(lags: dict[str, list[float]], behind: dict[str, list[float]], flips: int, gap: float) -> None:
    for title, table in (("behind the sampler's sample", lags), ("behind the change itself", behind)):
        base = statistics.median(table["Ray reporter"]) if table["Ray reporter"] else float("nan")
        print(f"\nGPU pane lag {title} (the pane polled at 1 Hz, as the app does)")
        for name, values in table.items():
            missed = flips - len(values)
            note = f"; {missed} flip(s) not shown within {gap:.0f} s" if missed else ""
            if not values:
                print(f"  {name:<40} never shown{note}")
                continue
            med = statistics.median(values)
            print(f"  {name:<40} median {med:4.1f} s  max {max(values):4.1f} s  ({med / base:.2f}x Ray's reporter)"
                  + note)
    fast = lags["miles (samples handed over at once)"]
    if fast:
        print(f"target <= 2 s (miles, samples handed over at once): max {max(fast):.1f} s "
              f"{'met' if max(fast) <= 2.0 else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=8)
    parser.add_argument("--gap", type=float, default=12.0,
                        help="seconds between flips (more than Ray's worst case: 5 s report + 2 s cache + polls)")
    args = parser.parse_args()

    async def bench(rc) -> None:  # type: ignore[no-untyped-def]
        report(*await measure(rc, args.flips, args.gap), args.flips, args.gap)

    run_on_fresh_cluster(0, bench)


if __name__ == "__main__":
    main()
