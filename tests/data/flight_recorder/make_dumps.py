"""Make the flight-recorder fixtures: real torch gloo jobs, 4 ranks on CPU, one per scenario.

Why captured: a first dump with stacks takes 4-12 s, too slow for every test run. Run (loopback only):
    unshare -n -- bash -c 'ip link set lo up; .venv/bin/python tests/data/flight_recorder/make_dumps.py'
Each rank runs two TP groups ({0,1}, {2,3}) and the world group; then the scenario's step, where rank 3
misbehaves; a thread in every living rank writes its pickled dump with stacks, `<scenario>/rank<r>`, a
few seconds later, while the others are still blocked, and the rank exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ("skip", "op", "size", "slow", "dead")
CULPRIT = 3


def _dump_later(path: Path, delay_s: float) -> None:
    import torch

    def run() -> None:
        time.sleep(delay_s)
        path.write_bytes(torch._C._distributed_c10d._dump_fr_trace(True, True, False))  # type: ignore[attr-defined]
        os._exit(0)

    threading.Thread(target=run, daemon=True).start()


def scenario_step(name: str, rank: int) -> None:
    """The step where rank 3 misbehaves."""
    import torch
    import torch.distributed as dist

    t = torch.ones(16)
    if rank != CULPRIT:
        dist.all_reduce(t)
    elif name == "skip":
        time.sleep(60)
    elif name == "op":
        dist.broadcast(t, src=0)
    elif name == "size":
        dist.all_reduce(torch.ones(32))
    elif name == "slow":
        time.sleep(1.0)
        dist.all_reduce(t)
    elif name == "dead":
        os._exit(1)


def rank_main(name: str, rank: int, port: int, out: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=4, init_method=f"tcp://127.0.0.1:{port}")
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    t = torch.ones(16)
    for _ in range(3):
        dist.all_reduce(t)
        dist.all_reduce(t, group=groups[rank // 2])
    _dump_later(out / f"rank{rank}", 8.0)
    try:
        scenario_step(name, rank)
    except RuntimeError:
        pass  # a peer died: keep the process for the dump
    time.sleep(60)


def run_scenario(name: str, out: Path, port: int) -> None:
    """One 4-rank job of `name`, its dumps written into `out` (bounded: 90 s a rank)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*"):
        old.unlink()
    procs = [
        subprocess.Popen([sys.executable, __file__, name, str(r), str(port), str(out)]) for r in range(4)
    ]
    for p in procs:
        try:
            p.wait(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> int:
    if len(sys.argv) == 5:
        rank_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return 0
    for i, name in enumerate(SCENARIOS):
        run_scenario(name, HERE / name, 29600 + i)
    return 0


if __name__ == "__main__":
    sys.exit(main())
