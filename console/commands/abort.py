"""`ultra-console abort`: stop a run gracefully and confirm it reached STOPPED.

The stop signal and grace period are the job's own (SIGINT and run.stop_wait_s for runs the
console launched; Ray's SIGTERM and 3 s for others). A PENDING job is not cancelled by Ray's stop:
the command says so and keeps watching. `--force` is the separate second step: SIGKILL the
driver's process tree now instead of waiting out the grace period.
Exit status: 0 the run ended STOPPED (or had already ended), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from backend.sanitize import shown_name
from console.commands._cluster import (
    add_job_arg,
    confirm,
    job_of,
    refuse_if_readonly,
    run_with,
    say,
    settings_of,
)

if TYPE_CHECKING:
    from backend.cluster.controller import RunController, RunEvent
    from backend.cluster.dashboard import JobInfo
    from backend.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("abort", help="stop a run gracefully (default: the latest run)")
    add_job_arg(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--force",
        action="store_true",
        help="second step: SIGKILL the driver's process tree now (skips miles' clean shutdown)",
    )
    p.add_argument("--no-wait", action="store_true", help="return once the stop is requested")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="how long to watch for STOPPED (default: the job's grace period + 30 s; 60 s after --force)",
    )
    p.set_defaults(func=run)


def _printer(event: RunEvent) -> None:
    if event.kind == "state" and event.state is not None:
        say(f"   {event.state.value}")
    elif event.kind in ("notice", "error", "recovered"):
        say(f"   {event.text}")


def _still_running(ctl: RunController, job: JobInfo, timeout: float) -> str:
    """The error for a job not ended after the wait, with what to do next for its state."""
    state = ctl.state.value if ctl.state else "unknown"
    hint = (
        "; Ray will start it when resources free up and stop it then"
        if state == "PENDING"
        else f"; to kill it now: ultra-console abort --job {shown_name(job.id)} --force"
    )
    return f"ultra-console: error: job {shown_name(job.id)} is still {state} after {timeout:.0f} s{hint}"


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.abort_policy import abort_policy

    refuse_if_readonly(settings_of(args), "abort")

    async def body(ctl: RunController, settings: Settings) -> int:
        job = await ctl.attach(job_of(args))
        if job.is_terminal:
            say(f"job {shown_name(job.id)} already ended {job.status}; nothing to stop")
            return 0
        policy = abort_policy(job, wait_s=args.timeout)
        signal, grace = policy.signal, policy.grace_s
        if args.force:
            question = (
                f"FORCE-stop {shown_name(job.id)} ({job.status}): SIGKILL its driver process tree now, "
                "without a clean shutdown?"
            )
            if not confirm(question, args.yes, "abort --force"):
                say("abort cancelled", err=True)
                return 1
            ctl.subscribe(_printer)
            say(await ctl.force_stop())
        else:
            if not confirm(
                f"Abort {shown_name(job.id)} ({job.status}) with {signal}, grace {grace} s?",
                args.yes,
                "abort",
            ):
                say("abort cancelled", err=True)
                return 1
            outcome = await ctl.abort()
            ctl.subscribe(_printer)
            say(outcome.message)
        if args.no_wait:
            return 0
        timeout = policy.wait_s(forced=args.force)
        try:
            final = await ctl.wait_terminal(timeout)
        except asyncio.TimeoutError:
            say(_still_running(ctl, job, timeout), err=True)
            return 1
        say(
            f"job {shown_name(final.id)} ended {final.status}"
            + (
                "; to check its nodes for leftover GPU processes: ultra-console cleanup"
                if final.is_terminal
                else ""
            )
        )
        return 0 if final.status == "STOPPED" else 1

    return run_with(args, body)
