"""A gloo job where one rank skips a collective and the others hang in it, each rank running torch's worker
debug server on `<fr dir>/worker_rank_<r>.sock` (the flight recorder's live door).

Used two ways: `python fr_hang.py RANK WORLD PORT FR_DIR SKIP HOLD_S` runs one rank (the unit tests start
4 as subprocesses); `run_rank` is what each Ray actor of tests/support/fr_ray_job.py calls. Bounded:
the process group times out after HOLD_S, the skipping rank sleeps HOLD_S, then every rank returns.
"""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def skip_the_collective(hold_s: float) -> None:
    """The culprit: never enters the all_reduce the others wait in."""
    time.sleep(hold_s)


def step_all_reduce(tensor: torch.Tensor) -> None:
    import torch.distributed as dist

    dist.all_reduce(tensor)


def run_rank(rank: int, world: int, port: int, fr_dir: str, skip: int, hold_s: float) -> str:
    """One rank: 3 agreed all_reduces, then the step where `skip` stays away; returns how it ended."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _WorkerServer

    Path(fr_dir).mkdir(parents=True, exist_ok=True)
    dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=world,
        init_method=f"tcp://127.0.0.1:{port}",
        timeout=datetime.timedelta(seconds=hold_s),
    )
    server = _WorkerServer(f"{fr_dir}/worker_rank_{rank}.sock")
    try:
        t = torch.ones(8)
        for _ in range(3):
            dist.all_reduce(t)
        if rank == skip:
            skip_the_collective(hold_s)
        else:
            step_all_reduce(t)
        return "done"
    except RuntimeError as err:
        return f"timed out: {str(err)[:80]}"
    finally:
        server.shutdown()


def ranks_waiting(folder: Path, ranks: range, seq: int) -> bool:
    """Every rank of `ranks` has recorded collective `seq`, as its worker server says (the test's wait)."""
    from backend.cluster import fr_job  # lazy: a Ray actor importing this module has no console

    for r in ranks:
        try:
            trace = fr_job.compact(fr_job.ask(str(folder / f"worker_rank_{r}.sock"), "fr_trace_json", 5))
        except (OSError, ValueError):
            return False
        entries = trace["entries"]
        assert isinstance(entries, list)
        if not any(e.get("collective_seq_id") == seq for e in entries):
            return False
    return True


if __name__ == "__main__":
    r, w, p, d, s, h = sys.argv[1:7]
    print(run_rank(int(r), int(w), int(p), d, int(s), float(h)), flush=True)
