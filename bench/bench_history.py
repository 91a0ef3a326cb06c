"""Time to rebuild the history of a 1M-line job log through `RayClient.read_log` (target <= 5 s).

A real loopback Ray head (backend/demo/local_cluster.py, inside `unshare -n`) runs a job that prints N lines
of 59 bytes (`epoch 3 step N loss=... lr=... tok/s=...`). Then, in the same run:
* baseline: `cat` of the same job-driver log file to /dev/null, and a plain Python line loop over it;
* `read_log`: the whole log streamed from `/api/v0/logs/file` and split into lines (median of 3);
* reference: one `GET /api/jobs/{id}/logs` (the endpoint the console never polls).
Figures are seconds and ratios against the `cat` baseline.

Usage: .venv/bin/python bench/bench_history.py [--lines 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import run_on_fresh_cluster  # noqa: E402

from backend.cluster.dashboard import RayClient  # noqa: E402
from backend.demo.local_cluster import LocalRayCluster  # noqa: E402

WRITER = (
    "import sys\nw = sys.stdout.write\nfor i in range({n}):\n"
    "    w(f'epoch 3 step {{i:07d}} loss=0.123456 lr=3.0e-04 tok/s=123456\\n')\n"
)


async def bench(rc: LocalRayCluster, n: int) -> None:
    async with RayClient(rc.address, timeout=120.0) as client:
        sid = await client.submit(
            {"entrypoint": shlex.join(["python3", "-c", WRITER.format(n=n)]), "submission_id": f"hist-{n}"}
        )
        while not (job := await client.get_job(sid)).is_terminal:
            await asyncio.sleep(0.5)
        assert job.status == "SUCCEEDED", job.message
        path = rc.session_dir / "logs" / f"job-driver-{sid}.log"
        size = path.stat().st_size

        t0 = time.perf_counter()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        cat_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with open(path, encoding="utf-8", errors="replace") as fh:
            local_lines = sum(1 for _ in fh)
        py_s = time.perf_counter() - t0

        runs = []
        for _ in range(3):
            before = client.requests_made
            t0 = time.perf_counter()
            count = 0
            async for _line in client.read_log(sid):
                count += 1
            runs.append(time.perf_counter() - t0)
            requests = client.requests_made - before
            assert count == local_lines, (count, local_lines)
        read_s = statistics.median(runs)

        t0 = time.perf_counter()
        resp = await client._http.get(f"/api/jobs/{sid}/logs")  # reference only: never used by the console
        resp.raise_for_status()
        jobs_logs_s = time.perf_counter() - t0

    print(f"log: {local_lines:,} lines, {size / 1e6:.1f} MB")
    print(f"baseline cat            : {cat_s:7.3f} s")
    print(f"baseline python lines   : {py_s:7.3f} s  ({py_s / cat_s:.1f}x cat)")
    print(
        f"read_log (median of 3)  : {read_s:7.3f} s  ({read_s / cat_s:.1f}x cat, {read_s / py_s:.1f}x "
        f"python lines), {requests} requests, runs {', '.join(f'{r:.2f}' for r in runs)}"
    )
    print(
        f"GET /api/jobs/id/logs   : {jobs_logs_s:7.3f} s  (reference, one-shot, 3.5-4x log size in head RAM)"
    )
    print(f"target <= 5 s: {'MET' if read_s <= 5 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    run_on_fresh_cluster(0, lambda rc: bench(rc, args.lines))


if __name__ == "__main__":
    main()
