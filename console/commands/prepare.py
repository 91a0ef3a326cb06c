"""`ultra-console prepare`: does every alive node hold the whole checkpoint and the dataset? `--fetch`
downloads what a node lacks from the hub, with progress per node.

Exit status: 0 every alive node is ready; 3 at least one node is not (each missing or short file is named
with its node); 1 bad input or no cluster (one line on stderr). The work is backend.cluster.prepare's; this
module adapts argparse and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from backend.errors import RefusedError
from console.commands._cluster import run_with, say
from console.commands.plan import add_spec_args

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.prepare import FetchEvent
    from backend.settings import Settings

EXIT_NOT_READY = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare", help="check (and with --fetch, download) the checkpoint and dataset on every node"
    )
    add_spec_args(p)
    p.add_argument(
        "--fetch",
        action="store_true",
        help="download what a node lacks (repo <model.org>/<model.name> and data.repo; $HF_ENDPOINT)",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="per-node job timeout in seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.prepare import prepare, table
    from backend.cluster.telemetry import snapshot
    from backend.plan.spec import build_spec

    spec = build_spec(args.preset, args.overrides)

    def progress(event: FetchEvent) -> None:
        say(event.line(), err=args.json)  # with --json, stdout holds only the report

    async def body(ctl: RunController, settings: Settings) -> int:
        if args.fetch and settings.readonly:
            raise RefusedError("prepare --fetch refused: the console is read-only (--readonly)")
        snap = await snapshot(ctl.client)
        report = await prepare(
            spec, ctl.client, snap, fetch=args.fetch, on_event=progress, timeout_s=args.timeout
        )
        if args.json:
            json.dump(report.to_json(), sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
        else:
            for line in table(report):
                say(line)
        return 0 if report.ready else EXIT_NOT_READY

    return run_with(args, body)
