"""`ultra-console replay`: placeholder while the replay app is built."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="open the console read-only over a saved log, a dump dir or a finished job")
    p.set_defaults(func=lambda args: 1)
