"""`ultra-console status`: the state of a run (the latest by default), rebuilt from Ray alone."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from backend.errors import ConsoleError
from backend.sanitize import sanitize_text
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
    from backend.settings import Settings
    from backend.signals.failures import Diagnosis


CAUSE_TAIL_LINES = 5000  # of a failed run's log, read for what said why it failed


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.durations import fmt_duration
    from backend.cluster.status_report import describe
    from backend.cluster.telemetry import snapshot

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        snap = await snapshot(ctl.client)
        info = describe(job, snap, ctl.state)
        # why it failed; for a run Ray calls a success, a traceback in its log casts a doubt on that
        found = await _cause(ctl, job) if job.status in ("FAILED", "SUCCEEDED") else None
        info["cause"] = found.to_json() if found is not None else None
        info["nodes"] = {
            "alive": len(snap.alive_nodes),
            "dead": [
                {"node_id": n.node_id, "name": n.name, "reason": n.death_reason} for n in snap.dead_nodes
            ],
        }
        if args.json:
            print(json.dumps(info))
            return 0
        end = info["end_time"] or time.time()
        started = info["start_time"]
        lines = [
            f"job      {info['job']}  ({info['kind']}{', run ' + info['run_id'] if info['run_id'] else ''})",
            f"status   {info['status']}"
            + (f"  (Ray: {info['ray_status']})" if info["status"] != info["ray_status"] else "")
            + (f"  for {fmt_duration(end - started)}" if started else ""),
        ]
        if info["message"]:
            lines.append(f"message  {info['message']}")
        if found is not None:
            lines += cause_lines(found)
        if info["failure_reason"]:
            lines.append(f"reason   {info['failure_reason']}")
        lines.append(f"stop     {info['stop']['signal']}, grace {info['stop']['grace_s']} s")
        lines.append(f"nodes    {info['nodes']['alive']} alive, {len(snap.dead_nodes)} dead")
        lines += [f"  dead   {n.label}: {n.death_reason}" for n in snap.dead_nodes]
        for line in lines:
            say(line)
        return 0

    return run_with(args, body)


async def _cause(ctl: RunController, job: JobInfo) -> Diagnosis | None:
    """What the run's log says killed it (the diagnosis: cause, where, the line, consequences); None if the
    log says nothing or cannot be read (Ray's own reason is printed either way)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.signals.ingest import text_chunks
    from backend.signals.monitor import RunMonitor

    text: list[str] = []
    try:
        async for chunk in text_chunks(ctl.client.read_log(job.id, tail=CAUSE_TAIL_LINES)):
            text.append(chunk.text)
    except ConsoleError:
        return None
    monitor = RunMonitor()
    monitor.facts.scan_text(
        " " + (job.entrypoint or "")
    )  # the run's shape (train ranks: who did not time out)
    monitor.on_job_status(job.status)
    monitor.feed_text(sanitize_text("".join(text)))
    return monitor.diagnosis()
