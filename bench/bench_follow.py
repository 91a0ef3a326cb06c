"""Dashboard requests per second while `RayClient.follow_log` follows a live job (target <= 1).

A real loopback Ray cluster (head + 1 worker, inside `unshare -n`) runs the simulated trainer
forever; the bench follows its log for `--seconds`, then stops the job and keeps following until
the follow ends by itself (job terminal, log drained). Requests are counted by
`RayClient.requests_made` (every HTTP request and every websocket connection). Baseline in the
same run: the naive follow loop (status + whole log, each second) over the same period, whose
requests and bytes are counted the same way.

Usage: .venv/bin/python bench/bench_follow.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import run_on_fresh_cluster  # noqa: E402

from backend.cluster.dashboard import RayClient  # noqa: E402
from backend.demo.local_cluster import LocalRayCluster  # noqa: E402
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT  # noqa: E402


async def naive_poll(address: str, sid: str, seconds: float) -> tuple[int, int]:
    """What the console must not do: status + GET /api/jobs/{id}/logs every second."""
    async with RayClient(address, timeout=60.0) as client:
        received = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await client.get_job(sid)
            received += len((await client.get_json(f"/api/jobs/{sid}/logs"))["logs"])
            await asyncio.sleep(1.0)
        return client.requests_made, received


async def bench(rc: LocalRayCluster, seconds: float) -> None:
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "2",
        "--sim-forever",
        "--sim-step-seconds",
        "0.5",
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
    ]
    async with RayClient(rc.address, timeout=60.0) as client:
        sid = await client.submit(
            {
                "entrypoint": shlex.join(argv),
                "submission_id": "follow-bench",
                "runtime_env": {"env_vars": {"RAY_JOB_STOP_SIGNAL": "SIGINT"}},
            }
        )
        while (await client.get_job(sid)).status == "PENDING":
            await asyncio.sleep(0.5)
        base_requests = client.requests_made
        lines = 0
        t0 = time.monotonic()
        stop_at = t0 + seconds
        phase_requests = None
        naive = asyncio.create_task(naive_poll(rc.address, sid, seconds))
        async for _line in client.follow_log(sid):
            lines += 1
            if phase_requests is None and time.monotonic() >= stop_at:
                phase_requests = client.requests_made - base_requests
                await client.stop_job(sid)
        total_s = time.monotonic() - t0
        total_requests = client.requests_made - base_requests
        naive_requests, naive_bytes = await naive
    if phase_requests is None:
        phase_requests = total_requests
    follow_rate = phase_requests / seconds
    naive_rate = naive_requests / seconds
    print(f"followed {lines:,} lines; {seconds:.0f} s live + {total_s - seconds:.1f} s stop/drain")
    print(f"follow_log while live   : {phase_requests} requests = {follow_rate:.3f} req/s")
    print(
        f"follow_log incl. stop   : {total_requests} requests over {total_s:.1f} s = "
        f"{total_requests / total_s:.3f} req/s (stop call included)"
    )
    print(
        f"baseline naive 1 Hz poll: {naive_requests} requests = {naive_rate:.2f} req/s, "
        f"{naive_bytes / 1e6:.1f} MB re-downloaded"
    )
    print(f"ratio follow/naive      : {follow_rate / naive_rate:.3f}")
    print(f"target <= 1 req/s: {'MET' if follow_rate <= 1 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    run_on_fresh_cluster(1, lambda rc: bench(rc, args.seconds))


if __name__ == "__main__":
    main()
