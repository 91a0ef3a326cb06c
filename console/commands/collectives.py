"""`ultra-console collectives`: which rank broke the collective the others wait in, from every rank's
PyTorch Flight Recorder (backend.cluster.flight_recorder): read live from the running job (`--job ID`,
default the latest run: torch's worker debug server of every rank, on every node, by
backend.cluster.fr_collect), or from dumps an operator copied off a cluster (`--from-dumps DIR`: one file
per rank, pickle or JSON, the rank at the end of the file's name).

Exit status: 0 the ranks agree, 4 a verdict (stderr: its line), 3 a file, a process or a node could not be
read, 1 bad input (no run, the run ended, not a folder).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from backend.sanitize import sanitize_text as sanitize
from console.commands._cluster import add_job_arg, job_of, log_ranks, run_with, say

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.flight_recorder import Analysis
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collectives", help="flight-recorder dumps: the rank that broke a collective, by majority"
    )
    p.add_argument("--from-dumps", metavar="DIR", default=None, help="a folder of dumps, one per rank")
    add_job_arg(p)
    p.add_argument(
        "--budget", type=float, default=None, metavar="S", help="seconds each node may spend (default 20)"
    )
    p.add_argument("--world-size", type=int, default=None, help="ranks that should have left a dump")
    p.add_argument("--json", action="store_true", help="print the analysis as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return from_dumps(args) if args.from_dumps else live(args)


def live(args: argparse.Namespace) -> int:
    """Every rank's trace read from the running job, the verdict printed (and on stderr)."""

    async def body(ctl: RunController, settings: Settings) -> int:
        # lazy: only this subcommand pays for it (see console/commands/__init__.py)
        from backend.cluster.fr_collect import NODE_BUDGET_S, job_collectives

        job = await ctl.attach(job_of(args))
        ranks = await log_ranks(ctl, job.id)  # else only the sockets' names say which rank
        report = await job_collectives(ctl.client, job, ranks=ranks, budget_s=args.budget or NODE_BUDGET_S)
        line = report.verdict_line()
        if args.json:
            print(json.dumps(report.to_json(), sort_keys=True))
        else:
            say(report.summary())
            for item in [*report.unreadable(), *report.notes]:
                say(f"  {item}")
            say(line or "every rank read entered the same collectives")
        if line:
            say(line, err=True)
            return 4
        return 3 if report.unreadable() or report.notes else 0

    return run_with(args, body)


def _print_analysis(analysis: Analysis, line: str) -> None:
    """The dumps read, the ranks that left none, the unreadable files and the verdict."""
    print(f"{len(analysis.ranks)} dumps (ranks {', '.join(map(str, analysis.ranks))})")
    if analysis.dead:
        print(f"no dump from rank(s) {', '.join(map(str, analysis.dead))}")
    for name, why in analysis.unreadable:
        print(sanitize(f"unreadable {name}: {why}"))
    print(sanitize(line) if line else "every rank entered the same collectives")


def from_dumps(args: argparse.Namespace) -> int:
    from backend.cluster.flight_recorder import analyse_dir  # lazy: only this subcommand pays for it

    folder = Path(args.from_dumps)
    if not folder.is_dir():
        print(f"not a folder: {folder}", file=sys.stderr)
        return 1
    analysis = analyse_dir(folder, world_size=args.world_size)
    if not analysis.ranks:
        print(f"no readable dump in {folder}", file=sys.stderr)
        for name, why in analysis.unreadable:
            print(sanitize(f"  {name}: {why}"), file=sys.stderr)
        return 1
    line = analysis.verdict.line() if analysis.verdict else ""
    if args.json:
        print(json.dumps(analysis.to_json(), indent=2, sort_keys=True))
    else:
        _print_analysis(analysis, line)
    if line:
        print(sanitize(line), file=sys.stderr)
        return 4
    return 3 if analysis.unreadable else 0
