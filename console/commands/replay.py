"""`ultra-console replay PATH | --job ID [B C …]`: the console, read-only, over a finished run: a saved Ray
job log, a miles `--dump-details` directory, or a job on the cluster. Run view charts, the Logs view (search,
filters, jump to time), Events with the alerts the run would have raised; `[` / `]` step a cursor by rollout.
Runs after the first (paths or job ids) are overlaid on its charts,
step-aligned, with what changed between their launches.

A path needs no cluster. The log's first piece is read before the app starts, so it is on the first frame;
the rest streams in behind it (console/replay.py). Bad input is one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

from backend.errors import ConsoleError
from console.commands._cluster import add_job_arg, job_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help="open the console read-only over a saved log, a dump dir or a finished job"
    )
    p.add_argument(
        "paths",
        nargs="*",
        default=[],
        metavar="PATH",
        help="a saved Ray job log, or a miles --dump-details directory; more runs (paths or finished "
        "jobs' ids) are compared with the first",
    )
    add_job_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.settings import load_settings
    from backend.signals.replay import ReplaySession, ReplaySource, detect_source, source_of

    job = job_of(args)
    if not args.paths and not job:
        raise ConsoleError("replay needs PATH or --job ID")
    first, others = (None, args.paths) if job else (args.paths[0], args.paths[1:])
    source = detect_source(first) if first else ReplaySource("job", job_id=job)
    for other in others:  # bad input is one line before the app starts
        source_of(other)
    settings = load_settings(address=args.address, token=args.token, readonly=True)
    spool = tempfile.mkdtemp(prefix="uc-replay-")  # the copy of the log the views read; gone on exit
    try:
        session = ReplaySession(source, spool)
        from console.app import UltraConsoleApp  # imported here: the CLI never pays for Textual

        try:
            app = UltraConsoleApp(settings, replay=session, compare=others)
            return int(app.run() or 0)
        finally:
            session.close()
    finally:
        shutil.rmtree(spool, ignore_errors=True)
