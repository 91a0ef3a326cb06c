"""`ultra-console`: the headless CLI and the entry point of the app.

Errors are one line on stderr and a non-zero exit status; a traceback is shown only with
ULTRA_CONSOLE_DEBUG=1. Every error line goes through backend.redaction.public_line: no secret, no escape
sequence, one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from backend.errors import ConsoleError
from backend.plan import preview_process as plan_preview
from backend.redaction import public_line, remember, url_password

PROG = "ultra-console"


class _Parser(argparse.ArgumentParser):
    """argparse that exits with status 1 and one line on a usage error (argparse's default is 2,
    which the `plan` contract reserves for error findings)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(1, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """`--version`: the package's version and the log scan engine chosen at start (hyperscan or pure),
    worked out only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and the log scan engine")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from backend.signals.scan_engine import engine_name

        try:
            mine = version(PROG)
        except PackageNotFoundError:  # run from a checkout that was never installed
            mine = "(not installed)"
        print(f"{PROG} {mine}\nlog scan engine: {engine_name()}")  # on stdout, as --version goes
        parser.exit(0)


def build_parser(*, commands: bool = True) -> argparse.ArgumentParser:
    """The CLI's parser; `commands=False` leaves the subcommands out (their modules are not imported)."""
    parser = _Parser(prog=PROG, description="Run console for miles GRPO on Nemotron-3-Ultra (Ray).")
    parser.add_argument("--version", action=_Version)
    _global_options(parser, None)
    parser.add_argument("--job", default=None, help="attach the app to this job instead of the latest")
    if not commands:
        parser.set_defaults(command=None)
        return parser
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # Imported here: opening the app parses without them (see parse), and the first frame skips them.
    from console.commands import (
        abort,
        cleanup,
        collectives,
        demo,
        doctor,
        launch,
        logs,
        metrics,
        nodes,
        plan,
        prepare,
        replay,
        resume,
        samples,
        serve,
        shim_check,
        stacks,
        status,
        watch,
    )

    in_help_order = (
        plan,
        launch,
        resume,
        status,
        logs,
        abort,
        cleanup,
        nodes,
        demo,
        shim_check,
        metrics,
        serve,
        prepare,
        watch,
        doctor,
    )
    for command in (*in_help_order, replay, stacks, collectives, samples):
        command.register(sub)
    for command_parser in sub.choices.values():
        # `ultra-console status --address URL` as well as `ultra-console --address URL status`: given after
        # the command they win; left out there, they do not reset what was given before it.
        _global_options(command_parser, argparse.SUPPRESS)
    return parser


# The cluster options every command takes, before or after its name.
_GLOBAL_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--address", {"help": "Ray dashboard URL (default $RAY_ADDRESS, else http://127.0.0.1:8265)"}),
    ("--token", {"help": "Ray auth token (default $RAY_AUTH_TOKEN)"}),
    ("--readonly", {"action": "store_true", "help": "refuse every action that changes the cluster"}),
)


def _global_options(parser: argparse.ArgumentParser, default: object) -> None:
    """Add _GLOBAL_OPTIONS (a command's own option of the same name is left as it is; `--job` after a command
    is the command's own, `sub_job`: commands/_cluster.py)."""
    for flag, kwargs in _GLOBAL_OPTIONS:
        try:
            parser.add_argument(flag, default=default, **kwargs)
        except argparse.ArgumentError:  # the command has its own option of that name
            continue


def _open_app(args: argparse.Namespace) -> int:
    # The plan is computed on another core while this process imports Textual (see plan_preview).
    preview = plan_preview.start(address=args.address, readonly=args.readonly)
    from console.app import run_app  # imported here: the CLI never pays for Textual

    return run_app(args, preview)


def _asks_help(token: str) -> bool:
    return token.startswith("-h") or (len(token) > 2 and "--help".startswith(token))


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse argv. Opening the app (global flags only, no help asked) skips importing every command
    module, which the first frame would otherwise wait for."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    if not any(_asks_help(t) for t in tokens):
        args, rest = build_parser(commands=False).parse_known_args(tokens)
        if not rest:
            return args
    return build_parser().parse_args(tokens)


def _check_scan_engine() -> None:
    """A forced log scan engine that cannot run is one line at start, before any worker makes a monitor
    (only looked at when `ULTRA_CONSOLE_SCAN_ENGINE` is set: the default never fails)."""
    if os.environ.get("ULTRA_CONSOLE_SCAN_ENGINE"):
        from backend.signals.scan_engine import default_engine

        default_engine()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    remember(args.token, url_password(args.address or ""))  # redacted from every line below, whatever fails
    func = getattr(args, "func", None) or _open_app
    try:
        _check_scan_engine()
        return int(func(args) or 0)
    except ConsoleError as err:
        print(f"{PROG}: error: {public_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # the last line of defence: never a traceback for the operator
        if os.environ.get("ULTRA_CONSOLE_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(err).__name__}: {public_line(str(err))} "
            "(set ULTRA_CONSOLE_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
