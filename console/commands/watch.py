"""`ultra-console watch`: start the watcher of a run launched elsewhere (or find the one it has).

A watcher is a Ray job on the head beside the run (backend.cluster.watcher): it reads the run like a
console would and sends its alerts, incidents and cause of death to the webhooks of the notification
settings, while no console is open. Every launch starts one; this is for a run that has none (miles' own
launcher, a launch with `--no-watcher`). Exit status: 0 a watcher runs (or the run needs none), 1 failure.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from console.commands._cluster import (
    add_job_arg,
    add_notify_arg,
    job_of,
    refuse_if_readonly,
    run_with,
    say,
    settings_of,
)

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch", help="start the watcher of a run (webhook notifications while nobody watches)"
    )
    add_job_arg(p)
    add_notify_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.watcher import ensure_watcher, options_from
    from backend.notify_settings import load_notify_file

    refuse_if_readonly(settings_of(args), "watch")
    notify = load_notify_file(args.notify) if args.notify is not None else None

    async def body(ctl: RunController, settings: Settings) -> int:
        options = options_from(settings, asked=True)
        assert options is not None  # not read-only: refused above
        if notify is not None:
            options = type(options)(options.address, options.state_dir, options.token, notify, options.poll_s)
        job = await ctl.attach(job_of(args))
        started = await ensure_watcher(ctl.client, job, options)
        if args.json:
            print(json.dumps({"run": job.id, "watcher": started.job, "started": started.started}))
        else:
            say(started.text)
        return 0

    return run_with(args, body)
