"""`ultra-console launch`: check a spec against the rules and the live cluster, then submit it.

Exit status: 0 submitted, 2 refused by an error finding (rules or preflight, e.g. another run
active), 1 any other failure or a declined confirmation.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from backend.sanitize import shown_name
from console.commands._cluster import (
    add_notify_arg,
    confirm,
    finding_lines,
    refuse_if_readonly,
    run_with,
    say,
    settings_of,
)
from console.commands.plan import add_spec_args

if TYPE_CHECKING:
    from backend.cluster.controller import LaunchRefused, RunController
    from backend.cluster.dashboard import JobInfo
    from backend.plan.finding import Finding
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="submit a run to the Ray cluster (after rules and preflight)")
    add_spec_args(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--force", action="store_true", help="launch even while another run is active")
    p.add_argument("--json", action="store_true", help="print one JSON object with the submitted job")
    add_notify_arg(p)
    p.add_argument("--no-watcher", action="store_true", help="start no watcher beside the run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.controller import LaunchRefused
    from backend.notify_settings import load_notify_file
    from backend.plan.run_id import new_run_id
    from backend.plan.spec import build_spec
    from backend.plan.submission import build_submission, secrets_from_env

    refuse_if_readonly(settings_of(args), "launch")
    notify = load_notify_file(args.notify) if args.notify is not None else None
    spec = build_spec(args.preset, args.overrides)
    secrets = secrets_from_env(os.environ)
    run_id = spec.run.id or new_run_id()

    async def body(ctl: RunController, settings: Settings) -> int:
        try:
            findings = await ctl.check(spec, force=args.force, record=True)
        except LaunchRefused as err:
            return _refused(err)
        _say_findings(findings)
        sub = build_submission(spec, run_id=run_id, secrets=secrets)
        if not args.json:
            say(sub.shell(settings.address))
        if not confirm(f"Launch {sub.submission_id} on {settings.address}?", args.yes, "launch"):
            say("launch cancelled", err=True)
            return 1
        if args.no_watcher:
            ctl.watcher = None
        notices = ctl.subscribe(lambda e: say(e.text) if e.kind == "notice" and not args.json else None)
        try:  # launch reads the cluster again under the launch claim: the answer may differ now
            job = await ctl.launch(spec, force=args.force, secrets=secrets, run_id=run_id, notify=notify)
        except LaunchRefused as err:
            return _refused(err)
        finally:
            notices()
        _say_launched(job, run_id, as_json=args.json)
        return 0

    return run_with(args, body)


def _say_findings(findings: Sequence[Finding]) -> None:
    """The plan's findings above info, if any, under a heading."""
    shown = [f for f in findings if f.severity != "info"]
    if shown:
        say("findings:")
        for line in finding_lines(shown):
            say(line)


def _say_launched(job: JobInfo, run_id: str, *, as_json: bool) -> None:
    """The launched job (one JSON object, or a line saying how to follow it)."""
    if as_json:
        print(json.dumps({"job": job.id, "status": job.status, "run_id": run_id}))
    else:
        say(
            f"launched {shown_name(job.id)} ({job.status}); follow it "
            f"with: ultra-console logs --job {shown_name(job.id)} --follow"
        )


def _refused(err: LaunchRefused) -> int:
    say(f"ultra-console: error: {err}", err=True)
    for line in finding_lines([f for f in err.findings if f.severity == "error"]):
        say(line, err=True)
    return err.exit_code
