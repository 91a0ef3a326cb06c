"""ActorDiedError read whole: the tab-indented field block under the error names the actor that died.

Ray prints `ActorDiedError: The actor died unexpectedly before finishing this task.`, then `class_name:`,
`actor_id:`, `pid:` (left out when 0), `name:` (named actors only), `namespace:`, `ip:`, then one reason
sentence (its worker process died, its owner died, its node died, it was killed by `ray.kill`, ...). The
process that printed the block is only the caller that saw it; the block is the answer
(miles-log-formats.md §3b).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from backend.signals.failures.owner import unquote
from backend.signals.grammar import parse_line

BLOCK_LINES = 10  # the header, six fields, the reason and its detail line
_FIELD = re.compile(r"\s*(class_name|actor_id|pid|name|namespace|ip):\s*(\S+)\s*$")
_HEAD = ("ActorDiedError", "RayActorError")
_REASON = re.compile(r"The actor (?:is dead|died) because (?P<reason>.+)")
_REASON_END = re.compile(r"\.? (?:There are some potential root causes|To troubleshoot|Check cluster logs)")
REASON_CHARS = 200
_TO_FIELD = {"class_name": "actor", "actor_id": "actor_id", "pid": "pid", "name": "actor_name", "ip": "ip"}


@dataclass(frozen=True, slots=True)
class ActorBlock:
    """What Ray's block said about the dead actor (fields as the catalog names them) and why it died."""

    fields: dict[str, str]
    reason: str | None  # "its worker process has died. Worker exit type: SYSTEM_ERROR …", "its node has died"

    def merged(self, groups: dict[str, str]) -> dict[str, str]:
        """The line's own groups win, but the block's reason sentence is why (the header only says that
        it died); the block fills what the line left out."""
        out = {**self.fields, **groups}
        if self.reason:
            out["reason"] = self.reason
        return out


def _message(line: str) -> str:
    line = unquote(line)
    return parse_line(line).message if line.startswith(("(", "\x1b", "^[")) else line


def _head_at(lines: Sequence[str], index: int) -> int | None:
    """The block's header line at or above `index` (a reason or field line points up to it)."""
    for j in range(index, max(-1, index - BLOCK_LINES), -1):
        if any(h in lines[j] for h in _HEAD):
            return j
    return None


def _reason(message: str) -> str | None:
    """The death's reason a block line states (to its end, cut), or None for another line."""
    r = _REASON.search(message)
    if r is None:
        return None
    return _REASON_END.split(r["reason"], maxsplit=1)[0].strip().rstrip(".")[:REASON_CHARS]


def read_block(lines: Sequence[str], index: int) -> ActorBlock | None:
    """The field block of the ActorDiedError at or above `lines[index]`, or None when there is none."""
    head = _head_at(lines, index)
    if head is None:
        return None
    fields: dict[str, str] = {}
    reason = None
    for j in range(head, min(len(lines), head + BLOCK_LINES)):
        message = _message(lines[j])
        if j > head and any(h in message for h in _HEAD):
            break  # the next error's block
        m = _FIELD.match(message)
        if m is not None:
            fields.setdefault(_TO_FIELD.get(m[1], m[1]), m[2])
            continue
        if reason is None:
            reason = _reason(message)
    if not fields and reason is None:
        return None
    return ActorBlock(fields, reason)


# torch elastic's root-cause table (torch/distributed/elastic/multiprocessing/errors: `_format_failure`):
# `  host      : node-07`, `  rank      : 27 (local_rank: 3)`, `  exitcode  : -9 (pid: 41017)`, then the line
# `  traceback : Signal 9 (SIGKILL) received by PID 41017` a kind matches.
_ELASTIC = re.compile(
    r"\s*(?:host\s*:\s*(?P<ip>\S+)|rank\s*:\s*(?P<rank>\d+)(?: \(local_rank: (?P<local_rank>\d+)\))?"
    r"|exitcode\s*:\s*(?P<exitcode>-?\d+)(?: \(pid: (?P<pid>\d+)\))?)\s*$"
)
ELASTIC_LINES = 8  # the table's rows above its traceback row


def read_elastic_block(lines: Sequence[str], index: int) -> dict[str, str]:
    """The fields of the torch elastic root-cause table whose rows end at `lines[index]` (empty: none)."""
    fields: dict[str, str] = {}
    for j in range(index - 1, max(-1, index - ELASTIC_LINES), -1):
        m = _ELASTIC.match(_message(lines[j]))
        if m is not None:
            for name, value in m.groupdict().items():
                if value is not None:
                    fields.setdefault(name, value)
    return fields
