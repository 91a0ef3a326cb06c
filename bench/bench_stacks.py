"""`stacks` over 3 nodes x 8 processes on a real loopback Ray cluster (started here, inside `unshare -n`).

The job: a driver that starts 8 actors pinned to each of the 3 nodes, each blocked in a function. Measured in
the same run: the wall time of the console's `stacks` (backend.cluster.stacks.job_stacks: the job's footprint,
one node-pinned py-spy job per node, grouping, the saved file), against the baseline of what an operator does
by hand: one bare `py-spy dump --pid` per process of the job, run one after another. Printed as a ratio
(console / baseline); the console pays Ray's job start-up per node, once, in parallel over the nodes.

Usage: .venv/bin/python bench/bench_stacks.py [--per-node 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _cluster import run_on_fresh_cluster  # noqa: E402

JOB = """
import sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
@ray.remote(num_cpus=0)
class Waiter:
    def block(self):
        def bench_blocked_in_collective():
            time.sleep(3600)
        bench_blocked_in_collective()
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
actors = [Waiter.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
          for n in nodes for _ in range(int(sys.argv[1]))]
ray.get([a.__ray_ready__.remote() for a in actors])
refs = [a.block.remote() for a in actors]
print("READY", len(actors), flush=True)
time.sleep(3600)
"""


async def bench(rc, per_node: int, repeat: int) -> None:
    from backend.cluster.dashboard import RayClient
    from backend.cluster.stacks import job_stacks

    py_spy = str(Path(sys.executable).parent / "py-spy")
    async with RayClient(rc.address, timeout=60) as client:
        sid = await client.submit(
            {
                "entrypoint": shlex.join(["python3", "-c", JOB, str(per_node)]),
                "submission_id": f"bench-stacks-{int(time.time())}",
            }
        )
        while not any("READY" in line for line in [line async for line in client.read_log(sid)]):
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        ours, bare = [], []
        with tempfile.TemporaryDirectory() as state:
            for _ in range(repeat):
                started = time.perf_counter()
                report = await job_stacks(client, await client.get_job(sid), state)
                ours.append(time.perf_counter() - started)
                pids = [p.pid for p in report.processes]
                blocked = sum(g.size for g in report.groups if "bench_blocked_in_collective" in g.headline)
                started = time.perf_counter()
                for pid in pids:  # the operator's way: one bare dump per process, one after another
                    subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, check=False)
                bare.append(time.perf_counter() - started)
                print(
                    f"stacks: {len(pids)} stacks ({blocked} blocked actors) in {len(report.groups)} group(s) "
                    f"from {report.nodes_asked} node(s): {ours[-1]:.2f} s; {len(pids)} bare py-spy dumps one "
                    f"after another: {bare[-1]:.2f} s"
                )
        await client.stop_job(sid)
    o, b = statistics.median(ours), statistics.median(bare)
    print(
        f"RESULT stacks {o:.2f} s vs sequential bare py-spy {b:.2f} s: ratio {o / b:.2f} "
        f"(median of {repeat}; < 1 means faster than dumping by hand)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    run_on_fresh_cluster(2, lambda rc: bench(rc, args.per_node, args.repeat))


if __name__ == "__main__":
    main()
