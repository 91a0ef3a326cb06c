"""Plumbing shared by the subcommands that talk to the cluster (launch, status, logs, abort,
cleanup, nodes): settings from the global flags, one RayClient, confirmation, safe printing.

Not a subcommand itself (console/cli.py does not register it). Everything that decides something lives in
backend; this only adapts argparse and the terminal to it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from backend.errors import ConsoleError, RefusedError
from backend.redaction import public_text

if TYPE_CHECKING:  # imported when a command runs: `--help` and the other commands never pay for httpx
    from backend.cluster.controller import RunController
    from backend.plan.finding import Finding
    from backend.settings import Settings

T = TypeVar("T")


def add_job_arg(parser: argparse.ArgumentParser) -> None:
    # dest differs from the global --job so a subparser default never overwrites `ultra-console --job X cmd`.
    parser.add_argument(
        "--job",
        dest="sub_job",
        default=None,
        metavar="ID",
        help="submission id or Ray job id (default: the latest run, ours or miles')",
    )


def add_notify_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--notify",
        type=Path,
        default=None,
        metavar="FILE",
        help="the run's notification settings (TOML, as the config's [notify]); default: the config's",
    )


def job_of(args: argparse.Namespace) -> str | None:
    return getattr(args, "sub_job", None) or getattr(args, "job", None)


def settings_of(args: argparse.Namespace) -> Settings:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.settings import load_settings

    return load_settings(address=args.address, token=args.token, readonly=args.readonly)


def refuse_if_readonly(settings: Settings, action: str) -> None:
    if settings.readonly:
        raise RefusedError(f"{action} refused: the console is read-only (--readonly)")


def run_with(args: argparse.Namespace, body: Callable[[RunController, Settings], Awaitable[T]]) -> T:
    """Run `body(controller, settings)` in a fresh event loop with one client to the dashboard."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient
    from backend.cluster.watcher import options_from

    settings = settings_of(args)

    async def main() -> T:
        token = settings.token_text()
        async with RayClient(settings.address, token, timeout=30.0) as client:
            ctl = RunController(
                client,
                state_dir=settings.state_dir,
                readonly=settings.readonly,
                poll_s=min(settings.poll_interval_s * 2, 5.0),
                watcher=options_from(settings),
            )
            return await body(ctl, settings)

    return asyncio.run(main())


def confirm(question: str, yes: bool, action: str) -> bool:
    """True when --yes, or the operator says y on a TTY; without a TTY and --yes: refused."""
    if yes:
        return True
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RefusedError(f"{action} refused: no terminal to confirm on; pass --yes")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


LOG_TAIL = 20000  # lines of the job log read to learn which process is which rank


async def log_ranks(ctl: RunController, job_id: str) -> dict[tuple[str, int], int]:
    """(node IP or "", pid) -> training rank from the job log's tail; empty when the log cannot be read
    (the caller's answer then names processes by node and pid only)."""
    # lazy: only the subcommands that name ranks pay for it
    from backend.signals.rank_map import process_ranks

    try:
        return process_ranks([line async for line in ctl.client.read_log(job_id, tail=LOG_TAIL)])
    except ConsoleError:
        return {}


def say(text: str, *, err: bool = False) -> None:
    """Print text that may come from Ray or the trainer:
    secrets redacted, escape sequences and controls removed."""
    stream = sys.stderr if err else sys.stdout
    stream.write(public_text(text) + "\n")
    stream.flush()


def finding_lines(findings: Sequence[Finding]) -> list[str]:
    return [
        f"  {f.severity:<7} [{f.rule}] {f.message}" + (f" — fix: {f.fix}" if f.fix else "") for f in findings
    ]
