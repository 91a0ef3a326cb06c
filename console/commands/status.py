"""`ultra-console status`: the state of a run (the latest by default), rebuilt from Ray alone."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from backend.sanitize import shown_name
from console.commands._cause import cause_lines
from console.commands._cluster import add_job_arg, job_of, run_with, say


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the state of a run (default: the latest)")
    add_job_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import JobInfo
    from backend.cluster.incidents import Entry
    from backend.cluster.telemetry import ClusterSnapshot
    from backend.settings import Settings
    from backend.signals.failures import Diagnosis


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.incidents import ledger_dir, since_last_looked
    from backend.cluster.status_report import describe
    from backend.cluster.telemetry import snapshot

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        snap = await snapshot(ctl.client)
        info = describe(job, snap, ctl.state)
        # why it failed; for a run Ray calls a success, a traceback in its log casts a doubt on that
        found = await _cause(ctl, job) if job.status in ("FAILED", "SUCCEEDED") else None
        info["cause"] = _cause_json(found, snap) if found is not None else None
        since = since_last_looked(ledger_dir(settings.state_dir, job.id), mark=not args.json)
        info["since_last_looked"] = [e.to_json() for e in since]
        info["nodes"] = {
            "alive": len(snap.alive_nodes),
            "dead": [
                {"node_id": n.node_id, "name": n.name, "reason": n.death_reason} for n in snap.dead_nodes
            ],
        }
        if args.json:
            print(json.dumps(info))
            return 0
        for line in _status_lines(info, found, snap, since):
            say(line)
        return 0

    return run_with(args, body)


def _cause_json(found: Diagnosis, snap: ClusterSnapshot) -> dict[str, Any]:
    """The diagnosis' JSON; with the log's IP, the name the cluster gives that node."""
    out = found.to_json()
    if found.cause.node:
        out["node_name"] = snap.names.shown(found.cause.node)
    return out


def _status_lines(
    info: dict[str, Any], found: Diagnosis | None, snap: ClusterSnapshot, since: list[Entry]
) -> list[str]:
    """The run's state as `status` prints it: the job, its status and age, why it failed, nodes, news."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.durations import fmt_duration
    from backend.cluster.incidents import since_lines

    end = info["end_time"] or time.time()
    started = info["start_time"]
    lines = [
        f"job      {shown_name(info['job'])}  "
        f"({info['kind']}{', run ' + info['run_id'] if info['run_id'] else ''})",
        f"status   {info['status']}"
        + (f"  (Ray: {info['ray_status']})" if info["status"] != info["ray_status"] else "")
        + (f"  for {fmt_duration(end - started)}" if started else ""),
    ]
    if info["message"]:
        lines.append(f"message  {info['message']}")
    if found is not None:
        lines += cause_lines(found, names=snap.names)
    if info["failure_reason"]:
        lines.append(f"reason   {info['failure_reason']}")
    lines.append(f"stop     {info['stop']['signal']}, grace {info['stop']['grace_s']} s")
    lines.append(f"nodes    {info['nodes']['alive']} alive, {len(snap.dead_nodes)} dead")
    lines += [f"  dead   {n.label}: {n.death_reason}" for n in snap.dead_nodes]
    return lines + since_lines(since)


async def _cause(ctl: RunController, job: JobInfo) -> Diagnosis | None:
    """What the run's log says killed it (the diagnosis: cause, where, the line, consequences); None if the
    log says nothing or cannot be read (Ray's own reason is printed either way)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.fr_collect import with_collective_cause
    from backend.cluster.resume import diagnose_job

    return with_collective_cause(await diagnose_job(ctl.client, job), job)
