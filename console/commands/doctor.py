"""`ultra-console doctor`: from the head, every check one line with its verdict and its fix (the dashboard,
its Ray version, auth, the Jobs API, the nodes; on every alive node by a pinned job: miles, the model and data
paths, the shared output directory, free disk for the checkpoints, py-spy and ptrace, NVML, the clock).

Exit status: 0 all good; 3 something to fix (each line says what); 1 bad input (a preset or --set that does
not parse). The work is backend.cluster.doctor's; this module adapts argparse and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from backend.errors import ConsoleError, SpecError
from console.commands._cluster import say, settings_of
from console.commands.plan import add_spec_args

if TYPE_CHECKING:
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check the head and every node for a run: one line per check, with its fix"
    )
    add_spec_args(p)
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="S",
        help="how long each node waits for the others' markers in the output directory (default 20)",
    )
    p.add_argument(
        "--disk-gb",
        type=float,
        default=None,
        metavar="GB",
        help="free disk the output directory needs (default: the plan's checkpoints, saves_kept of them)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from dataclasses import replace

    from backend.cluster.dashboard import RayClient
    from backend.cluster.doctor import HeadFacts, load_table, run_doctor
    from backend.plan.spec import build_spec
    from backend.settings import DEFAULT_ADDRESS, config_path

    spec = build_spec(args.preset, args.overrides)
    if (args.wait is not None and not 0 <= args.wait <= 600) or (
        args.disk_gb is not None and args.disk_gb < 0
    ):
        raise SpecError("--wait takes 0 to 600 seconds and --disk-gb a size >= 0")
    checks, limits = load_table()
    if args.wait is not None:
        limits = replace(limits, marker_wait_s=args.wait)
    path = config_path()
    config = f"{path} read" if path.exists() else f"{path} absent: defaults"
    settings: Settings | None = None
    try:
        settings = settings_of(args)
        base = HeadFacts(config=config, address=settings.address, token_set=settings.token is not None)
    except ConsoleError as err:
        base = HeadFacts(config=config, config_error=str(err), address=args.address or DEFAULT_ADDRESS)
    disk = None if args.disk_gb is None else int(args.disk_gb * 1e9)

    async def main() -> int:
        def answered(label: str) -> None:
            say(f"{label} answered", err=True)

        if settings is None:
            report = await run_doctor(spec, None, base, disk_need=disk, table=(checks, limits))
        else:
            async with RayClient(settings.address, settings.token_text(), timeout=15.0) as client:
                report = await run_doctor(
                    spec, client, base, disk_need=disk, table=(checks, limits), on_node=answered
                )
        if args.json:
            json.dump(report.to_json(), sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
        else:
            for line in report.lines():
                say(line)
        return report.exit_code

    return asyncio.run(main())
