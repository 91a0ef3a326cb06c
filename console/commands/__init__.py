"""Subcommands of `ultra-console`. Each module exposes `register(subparsers)`.

A module registers its parser and sets `func=run` where `run(args) -> int` returns the exit status.
Modules are imported lazily by name so a subcommand's heavy imports cost nothing for the others.
"""

COMMANDS: tuple[str, ...] = (
    "plan",
    "launch",
    "status",
    "logs",
    "abort",
    "cleanup",
    "nodes",
    "demo",
    "shim_check",
    "metrics",
    "serve",
    "prepare",
    "replay",
    "stacks",
    "watch",
    "samples",
    "doctor",
)
