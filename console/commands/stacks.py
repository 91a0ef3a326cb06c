"""`ultra-console stacks`: every process of the running job, on every node it runs on, its Python stack,
grouped (the smallest groups first: the odd one out is usually the culprit).

Read-only: py-spy only reads the processes (backend.cluster.stacks). The whole dump is saved under the state
dir and its path printed, to paste into an issue. A node that does not answer, or where py-spy cannot attach,
is named with its reason. Exit status: 0 every node answered, 3 a node or a process could not be read, 1 bad
input (no run, or the run ended).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from backend.sanitize import shown_name
from console.commands._cluster import add_job_arg, job_of, log_ranks, run_with, say

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stacks", help="every process of the running job: its Python stack (py-spy), grouped")
    add_job_arg(p)
    p.add_argument("--json", action="store_true", help="print the groups as one JSON object")
    p.add_argument("--native", action="store_true", help="also native frames (py-spy --native; slower)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="S",
        help="seconds each node may spend dumping (default 30)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(ctl: RunController, settings: Settings) -> int:
        # lazy: only this subcommand pays for it (see console/commands/__init__.py)
        from backend.cluster.stacks import NODE_BUDGET_S, job_stacks

        job = await ctl.attach(job_of(args))
        ranks = await log_ranks(ctl, job.id)  # unknown ranks: the stacks do not need them
        if not args.json:
            say(f"dumping the stacks of job {shown_name(job.id)} on every node it runs on…")
        report = await job_stacks(
            ctl.client,
            job,
            settings.state_dir,
            native=args.native,
            budget_s=args.budget or NODE_BUDGET_S,
            ranks=ranks,
            progress=lambda line: say(line, err=True),  # on stderr (also with --json): as nodes answer
        )
        if args.json:
            print(json.dumps(report.to_json()))
        else:
            say(report.summary())
            for line in report.lines():
                say(line)
            say(f"every stack saved to {report.saved_to}")
        unreadable = any(u.kind != "not_python" for u in report.unreadable)
        return 3 if report.failed_nodes or report.notes or unreadable else 0

    return run_with(args, body)
