"""Run-controller benchmarks on a real loopback Ray cluster (started here, inside `unshare -n`).

1. History rebuild of a 1M-line job log (what a newly started console does for `logs` / the app):
   the console's path (`RayClient.read_log` -> lines; and the `ultra-console logs` CLI end to end,
   sanitised, to /dev/null) against a baseline in the same run: the raw bytes of the same file
   streamed by plain httpx from the same endpoint. Target: <= 5 s.
2. Dashboard requests per second while the console follows a live run: job watch + telemetry
   poller (polled at 1 Hz like the app) + websocket log follow, counted by `RayClient.requests_made`,
   against the naive design (poll job, log and nodes at 1 Hz = 3 requests/s). Target: <= 1.

Usage: .venv/bin/python bench/bench_run.py [--lines 1000000] [--follow-seconds 45]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import reexec_in_loopback_netns  # noqa: E402

from console.commands.demo import write_demo_preset  # noqa: E402 (the demo's spec: simulated trainer, real paths)

LINE = (
    "[2026-11-30 06:00:00.000 actor_cell0_rank0] model.py:854 - step {i}: "
    "{{'train/loss': -0.000123, 'train/kl': 0.00042}}"
)


async def history(rc, lines: int) -> dict[str, float]:
    import httpx

    from backend.cluster.dashboard import RayClient

    code = f"print(*({LINE!r}.format(i=i) for i in range({lines})), sep=chr(10))"
    entry = shlex.join(["python3", "-c", code])
    async with RayClient(rc.address, timeout=60) as client:
        sid = await client.submit({"entrypoint": entry, "submission_id": f"bench-history-{int(time.time())}"})
        while not (job := await client.get_job(sid)).is_terminal:
            await asyncio.sleep(0.5)
        assert job.status == "SUCCEEDED", job.message
        params = {"node_id": job.driver_node_id, "submission_id": sid, "lines": -1}
        t0 = time.perf_counter()
        size = 0
        async with httpx.AsyncClient(base_url=rc.address, timeout=None) as raw:
            async with raw.stream("GET", "/api/v0/logs/file", params=params) as resp:
                async for chunk in resp.aiter_bytes(1 << 20):
                    size += len(chunk)
        base = time.perf_counter() - t0
        t0 = time.perf_counter()
        count = 0
        async for _line in client.read_log(sid):
            count += 1
        ours = time.perf_counter() - t0
    assert count >= lines, count
    env = dict(os.environ, PYTHONPATH=str(ROOT), ULTRA_CONSOLE_STATE_DIR=tempfile.mkdtemp())
    runs = []
    for _ in range(3):  # median of 3: the machine is shared, one run can be unlucky
        t0 = time.perf_counter()
        with open(os.devnull, "w") as sink:
            subprocess.run(
                [sys.executable, "-m", "console.cli", "--address", rc.address, "logs", "--job", sid],
                stdout=sink,
                check=True,
                env=env,
                cwd=ROOT,
            )
        runs.append(time.perf_counter() - t0)
    return {
        "lines": count,
        "bytes": size,
        "baseline_s": base,
        "read_log_s": ours,
        "cli_s": sorted(runs)[1],
        "cli_runs": runs,
    }


async def follow_rate(rc, seconds: float) -> dict[str, float]:
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient
    from backend.cluster.telemetry import TelemetryPoller

    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    async with RayClient(rc.address, timeout=30) as client:
        ctl = RunController(client, state_dir=tmp / "state")
        job = await ctl.launch(
            write_demo_preset(Namespace(nodes=1, rollouts=100_000, step_seconds=0.2), tmp)[1]
        )
        while (await client.get_job(job.id)).status != "RUNNING":
            await asyncio.sleep(0.5)
        lines = 0

        async def follow() -> None:
            nonlocal lines
            async for _ in client.follow_log(job.id):
                lines += 1

        async def telemetry() -> None:
            async for _ in TelemetryPoller(client, interval_s=1.0).run():
                pass

        start_requests, t0 = client.requests_made, time.monotonic()
        tasks = [asyncio.create_task(c) for c in (ctl.watch(until_terminal=False), follow(), telemetry())]
        await asyncio.sleep(seconds)
        elapsed, made = time.monotonic() - t0, client.requests_made - start_requests
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.stop_job(job.id)
    return {"seconds": elapsed, "requests": made, "rate": made / elapsed, "lines": lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--follow-seconds", type=float, default=45.0)
    args = parser.parse_args()
    reexec_in_loopback_netns()
    from backend.demo.local_cluster import LocalRayCluster

    with LocalRayCluster.start(workers=2) as rc:
        rc.assert_loopback_only()
        h = asyncio.run(history(rc, args.lines))
        f = asyncio.run(follow_rate(rc, args.follow_seconds))
    print(f"history of {h['lines']:,} lines ({h['bytes'] / 1e6:.0f} MB):")
    print(f"  baseline raw stream   {h['baseline_s']:.2f} s")
    print(
        f"  read_log -> lines     {h['read_log_s']:.2f} s  "
        f"({h['read_log_s'] / h['baseline_s']:.2f}x baseline)"
    )
    print(
        f"  `ultra-console logs`  {h['cli_s']:.2f} s  ({h['cli_s'] / h['baseline_s']:.2f}x baseline; "
        f"target <= 5 s: {'OK' if h['cli_s'] <= 5 else 'MISSED'}; median of "
        f"{', '.join(f'{x:.2f}' for x in h['cli_runs'])} s)"
    )
    print(
        f"following a live run for {f['seconds']:.0f} s ({f['lines']} log lines): {f['requests']} requests = "
        f"{f['rate']:.2f} req/s ({f['rate'] / 3.0:.2f}x the naive 3 req/s; target <= 1: "
        f"{'OK' if f['rate'] <= 1 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
