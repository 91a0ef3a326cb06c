"""`ultra-console serve`: the same app in a browser (textual-serve), for an SSH port-forward.

Bound to 127.0.0.1 by default: the page drives the real console (launch, abort), so listening on
another interface needs `--allow-remote`. Each browser tab starts `python -m console.cli` with the
same global flags; textual-serve runs that through a shell, so the line is built with shlex.join
from parsed values only, and the token travels in the environment (RAY_AUTH_TOKEN), never in argv.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import sys

from backend.errors import RefusedError

DEFAULT_PORT = 8000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the console to a browser (default http://127.0.0.1:8000)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (anyone who reaches it can drive the console)",
    )
    p.set_defaults(func=run)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def app_command(args: argparse.Namespace) -> str:
    """The shell line textual-serve runs per browser session (quoted; no secret in it)."""
    argv = [sys.executable, "-m", "console.cli"]
    if args.address:
        argv += ["--address", args.address]
    if args.readonly:
        argv.append("--readonly")
    if args.job:
        argv += ["--job", args.job]
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise RefusedError(f"--port {args.port} is not a TCP port (1-65535)")
    if not _is_loopback(args.host) and not args.allow_remote:
        raise RefusedError(
            f"refusing to serve on {args.host}: the page drives the console; "
            "use an SSH port-forward to 127.0.0.1, or pass --allow-remote"
        )
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from textual_serve.server import Server

    if args.token:
        os.environ["RAY_AUTH_TOKEN"] = args.token  # inherited by each session's app, not on its argv
    Server(app_command(args), host=args.host, port=args.port, title="ultra-console").serve()
    return 0
