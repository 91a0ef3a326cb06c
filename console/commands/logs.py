"""`ultra-console logs`: the driver log of a run, whole or its tail, optionally followed live.

History comes streamed from Ray's state API and follow from the job's websocket tail (never the
whole-log Jobs endpoint); every line goes through the sanitiser before it reaches the terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from typing import TYPE_CHECKING

from backend.sanitize import sanitize_text, shown_name
from console.commands._cluster import add_job_arg, job_of, run_with, say

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import JobInfo, RayClient
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="print a run's log (default: the latest run)")
    add_job_arg(p)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the run ends")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines (then follow)")
    p.set_defaults(func=run)


def _out(text: str) -> None:
    """Complete lines, sanitised, to stdout (flushed: a follower reads it as it comes)."""
    if text:
        sys.stdout.write(sanitize_text(text))
        sys.stdout.flush()


async def _running(ctl: RunController, job: JobInfo) -> JobInfo:
    """The job once it is no longer PENDING (said while it waits for resources)."""
    if job.status == "PENDING":
        say(
            f"job {shown_name(job.id)} is PENDING (waiting for resources); following starts when it runs",
            err=True,
        )
    while job.status == "PENDING":
        await asyncio.sleep(ctl.poll_s)
        job = await ctl.refresh()
    return job


async def _print_tail(client: RayClient, job: JobInfo, tail: int) -> int:
    """The log's last `tail` lines printed (none for 0); the line count read, where following starts."""
    offset = 0
    last: collections.deque[str] = collections.deque(maxlen=tail or 1)
    async for line in client.read_log(job.id):
        offset += 1
        last.append(line)
    _out("".join(f"{line}\n" for line in last) if tail else "")
    return offset


def run(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        say("ultra-console: error: --tail must be 0 or more", err=True)
        return 1

    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.signals.ingest import LIVE_FLUSH_S, text_chunks

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        client = ctl.client
        if not args.follow:
            async for chunk in text_chunks(client.read_log(job.id, tail=args.tail), max_lines=10_000):
                _out(chunk.text)
            if job.status == "PENDING":
                say(f"job {shown_name(job.id)} is PENDING: no driver log yet", err=True)
            return 0
        job = await _running(ctl, job)
        offset = await _print_tail(client, job, args.tail) if args.tail is not None else 0
        # a pipe is block-buffered: each chunk is flushed, and a live chunk waits at most LIVE_FLUSH_S
        async for chunk in text_chunks(client.follow_log(job.id, start_offset=offset), flush_s=LIVE_FLUSH_S):
            _out(chunk.text)
        final = await client.get_job(job.id)
        say(f"-- job {shown_name(final.id)} ended {final.status}", err=True)
        return 0

    return run_with(args, body)
