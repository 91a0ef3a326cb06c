"""How late a GPU change shows up in miles' dashboard streams (`--use-miles-dashboard`, 1 s flush) versus
Ray's reporter (`/nodes?view=summary`): the writer side of the GPU pane's freshness (target <= 2 s).

A real loopback Ray cluster (head only, inside `unshare -n`) runs the simulated trainer with its miles
dashboard on. Each trial changes GPU 3's utilisation in the node's fake NVML (the one both the sampler and
Ray's agent read) and measures, from that moment, when each source first reports the new value: the
dashboard's `gpu_util/` files through the console's own DumpReader, and Ray's summary through
`backend.cluster.telemetry.snapshot`. Both are polled every 0.1 s. Baseline in the same run: Ray's reporter.

Usage: .venv/bin/python bench/bench_gpu_streams.py [--trials 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from raycluster import LocalRayCluster, run_on_fresh_cluster  # noqa: E402

from backend.cluster.dashboard import RayClient  # noqa: E402
from backend.cluster.telemetry import snapshot  # noqa: E402
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT  # noqa: E402
from backend.signals.dump_reader import DumpReader  # noqa: E402

GPU = 3
TIMEOUT_S = 30.0


async def trial(client: RayClient, reader: DumpReader, override: Path, value: int) -> tuple[float, float]:
    """Seconds until the dump files and Ray's summary each report GPU 3 at `value` % after the change."""
    reader.poll()  # drop what is already written
    override.write_text(json.dumps({str(GPU): {"util": value}}))
    t0 = time.time()
    dump_lag = ray_lag = None
    while (dump_lag is None or ray_lag is None) and time.time() - t0 < TIMEOUT_S:
        if dump_lag is None and any(
            g["gpu"] == GPU and g["util"] == value and g["ts"] >= t0 for g in reader.poll().gpu_util
        ):
            dump_lag = time.time() - t0
        if ray_lag is None:
            snap = await snapshot(client, include_dead=False)
            if any(g.index == GPU and g.utilization_pct == value for n in snap.nodes for g in n.gpus or ()):
                ray_lag = time.time() - t0
        await asyncio.sleep(0.1)
    return (
        dump_lag if dump_lag is not None else float("inf"),
        ray_lag if ray_lag is not None else float("inf"),
    )


async def bench(rc: LocalRayCluster, trials: int) -> None:
    dump = rc.tmp / "bench-dump"
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--sim-forever",
        "--sim-step-seconds",
        "1",
        "--dump-details",
        str(dump),
        "--use-miles-dashboard",
        "--dashboard-flush-interval",
        "1",
    ]
    async with RayClient(rc.address, timeout=60.0) as client:
        sid = await client.submit({"entrypoint": shlex.join(argv), "submission_id": "gpu-streams-bench"})
        reader = DumpReader(dump, wait=True)
        deadline = time.monotonic() + 120
        while not reader.poll().gpu_util:
            assert time.monotonic() < deadline, "the dashboard streams never appeared"
            await asyncio.sleep(0.5)
        override = rc.fake_gpu_dir / rc.node_ids[0] / "override.json"
        results = [await trial(client, reader, override, 10 + 7 * i) for i in range(trials)]
        await client.stop_job(sid)
    dump_lags = [d for d, _ in results]
    ray_lags = [r for _, r in results]
    print(f"{trials} changes of GPU {GPU}'s utilisation in the fake NVML, seen by each source (s):")
    print("  miles streams (1 s flush): " + " ".join(f"{x:.2f}" for x in dump_lags))
    print("  Ray reporter (baseline)  : " + " ".join(f"{x:.2f}" for x in ray_lags))
    med_d, med_r = statistics.median(dump_lags), statistics.median(ray_lags)
    print(
        f"median lag: streams {med_d:.2f} s, Ray {med_r:.2f} s; max: streams {max(dump_lags):.2f} s, "
        f"Ray {max(ray_lags):.2f} s"
    )
    print(f"ratio streams/Ray (median): {med_d / med_r:.2f}")
    print(f"target <= 2 s (streams, max): {'MET' if max(dump_lags) <= 2.0 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    run_on_fresh_cluster(0, lambda rc: bench(rc, args.trials))


if __name__ == "__main__":
    main()
