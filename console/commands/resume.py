"""`ultra-console resume`: a failed or stopped run's next attempt, from its own plan, with the diagnosis's
fix, from its last complete checkpoint, linked to the attempt before.

Without --yes it shows the plan diff, the checkpoint and the advice and launches nothing (on a terminal it
asks); --json prints them as one object. Exit status: 0 shown or launched, 2 the fixed plan has an error
finding (or the advice is STOP and --force was not given), 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from console.commands._cluster import (
    add_job_arg,
    finding_lines,
    job_of,
    refuse_if_readonly,
    run_with,
    say,
    settings_of,
)

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.resume import ResumePlan
    from backend.plan.fixes import FixedPlan
    from backend.plan.spec import RunSpec
    from backend.settings import Settings

REFUSED = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "resume", help="relaunch a failed or stopped run from its last checkpoint, with its fix"
    )
    add_job_arg(p)
    p.add_argument("--json", action="store_true", help="print the plan diff, checkpoint and advice as JSON")
    p.add_argument("--yes", action="store_true", help="launch the next attempt without asking")
    p.add_argument(
        "--force", action="store_true", help="launch even when the advice is STOP or a run is active"
    )
    p.add_argument("--drop", action="append", default=[], metavar="FIELD", help="leave a proposed edit out")
    p.add_argument("--accept", action="append", default=[], metavar="FIELD", help="take an offered edit")
    p.set_defaults(func=run)


def accepted_fields(plan: ResumePlan, accept: list[str], drop: list[str]) -> set[str]:
    """The edits the operator keeps: each edit's default, plus --accept, minus --drop."""
    fields = {e.field for e in plan.edits}
    unknown = sorted(set(accept + drop) - fields)
    if unknown:
        # lazy: only this subcommand pays for it (see console/commands/__init__.py)
        from backend.errors import SpecError

        raise SpecError(
            f"no proposed edit of {', '.join(unknown)} (the diff has: {', '.join(sorted(fields)) or 'none'})"
        )
    return ({e.field for e in plan.edits if e.accepted} | set(accept)) - set(drop)


def plan_lines(plan: ResumePlan, accepted: set[str]) -> list[str]:
    """The resume as the operator reads it."""
    src = plan.plan
    lines = [f"resume   {plan.job.id} ({plan.job.status}) as attempt {plan.next_attempt} of {plan.chain}"]
    lines.append(
        f"plan     from its {'submission metadata' if src.source == 'metadata' else 'train.py argv'}"
    )
    if src.parsed is not None:
        lines += [f"  unmapped {flag}  (carried in run.extra_args)" for flag in src.parsed.unmapped]
        lines += [f"  dropped  {flag}: {why}" for flag, why in src.parsed.dropped]
    if plan.diagnosis is not None:
        lines.append(f"cause    {plan.diagnosis.headline}")
    lines.append("diff" + ("     (none)" if not plan.edits else ""))
    for e in plan.edits:
        mark = "x" if e.field in accepted else " "
        lines.append(f"  [{mark}] {e.field} {e.before} -> {e.after}  ({e.why})")
    lines.append(f"load     {plan.checkpoint.save_dir or '-'}: {plan.checkpoint.note}")
    lines.append(f"advice   {plan.advice.action.upper()}: {plan.advice.reason}")
    return lines


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.controller import LaunchRefused
    from backend.cluster.resume import plan_resume, record_resume
    from backend.plan.submission import secrets_from_env

    if args.yes:
        refuse_if_readonly(settings_of(args), "resume")

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        plan = await plan_resume(ctl.client, job, await ctl.client.list_jobs())
        accepted = accepted_fields(plan, args.accept, args.drop)
        spec, fixed = plan.spec(accepted)
        out = plan.to_json() | {"accepted": sorted(accepted), "launchable": fixed.launchable}
        findings = [f for f in fixed.findings if f.severity != "info"]
        out["findings"] = [f.to_json() for f in findings]
        if not args.json:
            for line in [*plan_lines(plan, accepted), *finding_lines(findings)]:
                say(line)
        launch = _to_launch(args, plan, fixed, spec)
        if isinstance(launch, int):
            return _done(args, out, launch)
        refuse_if_readonly(settings, "resume")
        try:
            new = await ctl.launch(
                launch, force=args.force, secrets=secrets_from_env(os.environ), links=plan.links()
            )
        except LaunchRefused as err:
            say(f"ultra-console: error: {err}", err=True)
            return _done(args, out, err.exit_code)
        record_resume(ctl.audit, plan, new.id, accepted)
        out["launched"] = {"job": new.id, "status": new.status, "run_id": (new.meta.text("run_id") or None)}
        if not args.json:
            say(f"launched {new.id} ({new.status}): attempt {plan.next_attempt} of {plan.chain}")
        return _done(args, out, 0)

    return run_with(args, body)


def _to_launch(
    args: argparse.Namespace, plan: ResumePlan, fixed: FixedPlan, spec: RunSpec | None
) -> RunSpec | int:
    """The spec to launch, or the exit status when this attempt is not launched (a fixed plan that cannot
    be, STOP advice without --force, no yes), said."""
    if spec is None or not fixed.launchable:
        say("ultra-console: error: the fixed plan cannot be launched: " + _why(fixed), err=True)
        return REFUSED
    if plan.advice.action == "stop" and not args.force:
        if args.yes:
            say("ultra-console: error: the advice is STOP; pass --force to resume anyway", err=True)
            return REFUSED
        return 0
    if not args.yes and not _asked(args, plan):
        return 0
    return spec


def _why(fixed: FixedPlan) -> str:
    if fixed.field_errors:
        return "; ".join(f"{k}: {v}" for k, v in fixed.field_errors.items())
    found = [f for f in fixed.findings if f.severity == "error"]
    return found[0].message if found else (fixed.error or "no valid spec")


def _asked(args: argparse.Namespace, plan: ResumePlan) -> bool:
    """On a terminal, the operator's yes; elsewhere no launch (the plan was shown; --yes launches)."""
    if args.json or not (sys.stdin.isatty() and sys.stdout.isatty()):
        if not args.json:
            say("pass --yes to launch this attempt")
        return False
    try:
        answer = input(f"Launch attempt {plan.next_attempt}? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _done(args: argparse.Namespace, out: dict[str, object], code: int) -> int:
    if args.json:
        print(json.dumps(out))
    return code
