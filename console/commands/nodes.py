"""`ultra-console nodes`: every Ray node (alive or dead, with Ray's reason) and its GPUs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from console.commands._cluster import run_with, say

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.telemetry import GpuSnapshot, NodeSnapshot
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nodes", help="list the cluster's nodes and GPUs")
    p.add_argument("--json", action="store_true", help="print the snapshot as one JSON object")
    p.set_defaults(func=run)


def _util_text(gpus: list[GpuSnapshot]) -> str:
    """The mean utilisation of the GPUs that report one."""
    utils = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    return f"util {sum(utils) / len(utils):.0f}%" if utils else "util n/a"


def _mem_text(gpus: list[GpuSnapshot]) -> str:
    """Memory used of the total, over every GPU of the node."""
    used = sum(g.mem_used_mb for g in gpus)
    total = sum(g.mem_total_mb for g in gpus)
    return f"mem {used / 1024:.0f}/{total / 1024:.0f} GiB" if total else "mem n/a"


def _gpu_summary(node: NodeSnapshot) -> str:
    if not node.alive:
        return f"{node.state}: {node.death_reason}"
    if node.gpus is None:
        return "no GPU telemetry"
    procs = sum(len(g.processes) for g in node.gpus)
    util, mem = _util_text(node.gpus), _mem_text(node.gpus)
    age = f", {node.telemetry_age_s:.0f}s old" if node.telemetry_age_s is not None else ""
    stale = " STALE" if node.stale else ""
    return f"{len(node.gpus)} GPUs {util} {mem}, {procs} process(es){age}{stale}"


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.telemetry import TelemetryPoller

    async def body(ctl: RunController, settings: Settings) -> int:
        snap = await TelemetryPoller(ctl.client).poll_once()
        if args.json:
            print(snap.to_json())
            return 0
        say(f"{len(snap.alive_nodes)} alive, {len(snap.dead_nodes)} dead (Ray {snap.ray_version or '?'})")
        for node in snap.nodes:
            used = "?" if node.logical_gpus_used is None else f"{node.logical_gpus_used:g}"
            head = " head" if node.is_head else ""
            say(
                f"{node.label:<28} {'ALIVE' if node.alive else node.state:<6}{head:<5} "
                f"GPU {used}/{node.logical_gpus_total:g}  {_gpu_summary(node)}"
            )
        return 0

    return run_with(args, body)
