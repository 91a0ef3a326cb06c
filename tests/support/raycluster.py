"""The loopback-only multi-node Ray test cluster: the code lives in backend/demo/local_cluster.py (the
`ultra-console demo` starts the same cluster); this module keeps the tests' import path and adds
what only scripts need."""

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

from backend.demo.local_cluster import (  # noqa: F401
    FAKEGPU_DIR,
    LOOPBACK,
    REPO,
    LocalRayCluster,
    cluster_env,
    free_port,
)


def reexec_in_loopback_netns() -> None:
    """For benches: re-run the current script inside `unshare -n` with only `lo` up, so the Ray
    cluster it starts can neither reach nor be reached from another address."""
    if os.environ.get("RAYCLUSTER_NETNS") == "1":
        return
    os.environ["RAYCLUSTER_NETNS"] = "1"
    script = 'ip link set lo up && exec "$0" "$@"'
    os.execvp("unshare", ["unshare", "-n", "--", "bash", "-c", script, sys.executable, *sys.argv])


def run_on_fresh_cluster(workers: int, bench: Callable[[LocalRayCluster], Awaitable[None]]) -> None:
    """What every bench does: private netns, a fresh cluster checked for loopback, run, tear down."""
    reexec_in_loopback_netns()
    with LocalRayCluster.start(workers=workers) as rc:
        rc.assert_loopback_only()
        print(f"cluster: {len(rc.node_ids)} node(s) up in {rc.start_seconds:.1f} s")
        asyncio.run(bench(rc))


if __name__ == "__main__":
    import runpy

    runpy.run_module("backend.demo.local_cluster", run_name="__main__")
