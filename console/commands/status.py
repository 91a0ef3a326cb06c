"""`ultra-console status`: the state of a run (the latest by default), rebuilt from Ray alone."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from console.commands._cluster import add_job_arg, job_of, run_with, say


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the state of a run (default: the latest)")
    add_job_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings


def run(args: argparse.Namespace) -> int:
    from backend.cluster.durations import fmt_duration
    from backend.cluster.run_status import describe
    from backend.cluster.telemetry import snapshot

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        snap = await snapshot(ctl.client)
        info = describe(job, snap, ctl.state)
        info["nodes"] = {"alive": len(snap.alive_nodes), "dead": [
            {"node_id": n.node_id, "name": n.name, "reason": n.death_reason} for n in snap.dead_nodes]}
        if args.json:
            print(json.dumps(info))
            return 0
        end = info["end_time"] or time.time()
        started = info["start_time"]
        lines = [
            f"job      {info['job']}  ({info['kind']}{', run ' + info['run_id'] if info['run_id'] else ''})",
            f"status   {info['status']}" + (f"  (Ray: {info['ray_status']})" if info['status'] != info['ray_status'] else "")
            + (f"  for {fmt_duration(end - started)}" if started else ""),
        ]
        if info["message"]:
            lines.append(f"message  {info['message']}")
        if info["failure_reason"]:
            lines.append(f"reason   {info['failure_reason']}")
        lines.append(f"stop     {info['stop']['signal']}, grace {info['stop']['grace_s']} s")
        lines.append(f"nodes    {info['nodes']['alive']} alive, {len(snap.dead_nodes)} dead")
        lines += [f"  dead   {n.label}: {n.death_reason}" for n in snap.dead_nodes]
        for line in lines:
            say(line)
        return 0

    return run_with(args, body)
