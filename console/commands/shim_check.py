"""`ultra-console shim-check --checkpoint DIR [--json]`: the NemotronH provider fields, expected vs built.

Exit status: 0 no mismatch, 2 a mismatch (the provider would run with wrong MoE routing), 1 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.errors import ConsoleError

EXIT_MISMATCH = 2


class ShimCheckError(ConsoleError):
    """The checkpoint's config.json cannot be read or is not a NemotronH config."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "shim-check",
        help="compare the NemotronH provider fields a checkpoint needs with what "
        "megatron-bridge builds (with the shim)",
    )
    p.add_argument(
        "--checkpoint", required=True, metavar="DIR", help="HF checkpoint directory holding config.json"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--without-shim",
        action="store_true",
        help="diagnostic: build the provider with megatron-bridge alone, to see what the shim fixes",
    )
    p.add_argument(
        "--expected-only",
        action="store_true",
        help="print the expected fields without building a provider even where megatron-bridge exists",
    )
    p.set_defaults(func=run)


def _value(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def render_text(result: dict[str, Any]) -> str:
    lines = [f"checkpoint {result['checkpoint']}"]
    actual = result["actual"]
    bad = {m["field"] for m in result["mismatches"]}
    if not result["expected"]:
        lines.append("no routed experts in config.json: the shim sets no provider field")
    for name, want in result["expected"].items():
        got = "" if actual is None else f"  actual {_value(actual.get(name))}"
        mark = "MISMATCH" if name in bad else ("ok" if actual is not None else "")
        lines.append(f"  {name:40} {_value(want):24}{got:32} {mark}".rstrip())
    if result["note"]:
        lines.append(result["note"])
    if actual is not None:
        lines.append(_verdict_line(result))
    return "\n".join(lines)


def _verdict_line(result: dict[str, Any]) -> str:
    """Whether the provider built on CPU got every field, with or without the shim."""
    how = "with the shim" if result["shim_installed"] else "WITHOUT the shim"
    if result["ok"]:
        return f"provider built on CPU {how}: ok: the provider gets every field"
    return (
        f"provider built on CPU {how}: MISMATCH in {len(result['mismatches'])} field(s): "
        "launching would run with wrong MoE settings"
    )


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from shim.check import run_check
    from shim.mapping import ShimConfigError

    try:
        result = run_check(
            args.checkpoint, with_shim=not args.without_shim, use_bridge=False if args.expected_only else None
        ).to_json()
    except ShimConfigError as err:
        raise ShimCheckError(str(err)) from None
    if args.json:
        json.dump(result, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        print(render_text(result))
    return 0 if result["ok"] else EXIT_MISMATCH
