"""The Ray job of tests/cluster/test_collectives_ray.py: 4 gloo actors over 2 nodes (ranks 0-1 on the first,
2-3 on the second), each running torch's worker debug server (tests/support/fr_hang.py); rank 3 skips the
4th all_reduce, the others hang in it. Bounded: every rank returns after HOLD_S, the driver after HOLD_S+60.

    python fr_ray_job.py FR_DIR HOLD_S NODE_A NODE_B
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

WORLD = 4
SKIP = 3


class HangRank:
    """One rank of the gloo world (the process the console must find and read)."""

    def run(self, rank: int, port: int, fr_dir: str, hold_s: float) -> str:
        import fr_hang  # on the job's PYTHONPATH (tests/support)

        return fr_hang.run_rank(rank, WORLD, port, fr_dir, SKIP, hold_s)


def main(fr_dir: str, hold_s: float, nodes: list[str]) -> int:
    ray.init()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    remote_rank = ray.remote(num_cpus=0)(HangRank)
    actors: list[Any] = [
        remote_rank.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[r // 2], soft=False)
        ).remote()
        for r in range(WORLD)
    ]
    refs = [a.run.remote(r, port, fr_dir, hold_s) for r, a in enumerate(actors)]
    print("fr_ray_job: 4 ranks started", flush=True)
    print("fr_ray_job:", ray.get(refs, timeout=hold_s + 60), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), sys.argv[3:5]))
