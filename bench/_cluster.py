"""What every Ray bench does first: a private network namespace, then a fresh loopback cluster."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

from backend.demo.local_cluster import LocalRayCluster


def reexec_in_loopback_netns() -> None:
    """For benches: re-run the current script inside `unshare -n` with only `lo` up, so the Ray
    cluster it starts can neither reach nor be reached from another address."""
    if os.environ.get("RAYCLUSTER_NETNS") == "1":
        return
    os.environ["RAYCLUSTER_NETNS"] = "1"
    script = 'ip link set lo up && exec "$0" "$@"'
    os.execvp("unshare", ["unshare", "-n", "--", "bash", "-c", script, sys.executable, *sys.argv])


def run_on_fresh_cluster(
    workers: int,
    bench: Callable[[LocalRayCluster], Awaitable[None]],
    *,
    gpus: int = 8,
    fake_gpus: bool = True,
) -> None:
    """What every bench does: private netns, a fresh cluster checked for loopback, run, tear down."""
    reexec_in_loopback_netns()
    with LocalRayCluster.start(workers=workers, gpus=gpus, fake_gpus=fake_gpus) as rc:
        rc.assert_loopback_only()
        print(f"cluster: {len(rc.node_ids)} node(s) up in {rc.start_seconds:.1f} s")
        asyncio.run(bench(rc))
