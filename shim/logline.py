"""The one line each train actor logs about the shim, and its parser.

The console's alerts match these strings, so they are constants and the only place that formats or
parses them. Three forms, each on one line (the second wrapped here):

    ultra-console shim: applied NemotronH provider fields {json}
    ultra-console shim: applied NemotronH provider fields (mapping only; megatron.bridge not importable)
        {json}
    ultra-console shim: NOT applied: <reason>

The JSON holds the provider fields the actor ended up with (sorted keys, no spaces). The
"mapping only" form comes from a worker without megatron.bridge (the simulated trainer): the fields
are the ones computed from the checkpoint's config.json, not read back from a provider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

LINE_PREFIX = "ultra-console shim: "
APPLIED_PREFIX = "ultra-console shim: applied NemotronH provider fields "
MAPPING_ONLY_MARK = "(mapping only; megatron.bridge not importable) "
NOT_APPLIED_PREFIX = "ultra-console shim: NOT applied: "

_ANY = re.compile(r"ultra-console shim: (?:applied NemotronH provider fields |NOT applied: )")

Status = Literal["applied", "mapping_only", "not_applied"]


@dataclass(frozen=True)
class ShimLine:
    status: Status
    fields: dict[str, object] = field(default_factory=dict)
    reason: str = ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def applied(fields: Mapping[str, object], *, mapping_only: bool = False) -> str:
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return APPLIED_PREFIX + (MAPPING_ONLY_MARK if mapping_only else "") + body


def not_applied(reason: str) -> str:
    return NOT_APPLIED_PREFIX + (_one_line(reason) or "unknown reason")


def parse(line: str, loads: Callable[[str], object] = json.loads) -> ShimLine | None:
    """The shim line inside one log line (Ray prefixes like '(pid=1, ip=x)' are allowed), else None.

    A line that starts like a shim line but carries unreadable JSON parses as not_applied, so a
    garbled line is never mistaken for a good one. `loads` reads the JSON: the console passes one with
    depth, size and item limits (backend.signals.bounded_json; this package is shipped alone to every
    worker, so it cannot import the console's); any ValueError or RecursionError it raises is "unreadable".
    """
    match = _ANY.search(line)
    if match is None:
        return None
    rest = line[match.start() :]
    if rest.startswith(NOT_APPLIED_PREFIX):
        return ShimLine("not_applied", reason=rest[len(NOT_APPLIED_PREFIX) :].strip())
    body = rest[len(APPLIED_PREFIX) :]
    status: Status = "applied"
    if body.startswith(MAPPING_ONLY_MARK):
        status, body = "mapping_only", body[len(MAPPING_ONLY_MARK) :]
    try:
        fields = loads(body.strip())
    except (ValueError, RecursionError) as err:  # JSONDecodeError, a 5000-digit number, deep nesting, limits
        return ShimLine("not_applied", reason=f"unreadable shim line ({_one_line(str(err))[:120]})")
    if not isinstance(fields, dict):
        return ShimLine("not_applied", reason="unreadable shim line")
    return ShimLine(status, fields=fields)
