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
# GenNodeDiedCause's second line: `\tthe actor's node was terminated unexpectedly: health check failed …`
_NODE_WHY = re.compile(
    r"\s*the actor's node was (?P<why>terminated unexpectedly|terminated expectedly|preempted|terminated): ?"
    r"(?P<detail>.*)"
)
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
        why = _NODE_WHY.match(message)
        if why is not None:
            fields["node_why"] = f"the node was {why['why']}: {why['detail'].strip()}"[:REASON_CHARS].rstrip(
                ": "
            )
            continue
        if reason is None:
            reason = _reason(message)
    if not fields and reason is None:
        return None
    return ActorBlock(fields, reason)


# torch elastic's table (torch/distributed/elastic/multiprocessing/errors/__init__.py:
# `_FAILURE_FORMAT_TEMPLATE`, `ChildFailedError.format_msg`): `<name> FAILED`, then `Failures:` (every failure
# but the root, or `<NO_OTHER_FAILURES>`), then `Root Cause (first observed failure):` (the earliest one);
# each failure `[idx]:` then `  time      : 2026-12-01_10:00:05`, `  host      : node-07`,
# `  rank      : 27 (local_rank: 3)`, `  exitcode  : -9 (pid: 41017)`, `  error_file: <N/A>` and
# `  traceback : Signal 9 (SIGKILL) received by PID 41017` (or the child's traceback, indented).
_ELASTIC = re.compile(
    r"\s*(?:time\s*:\s*(?P<failed_at>\d{4}-\d\d-\d\d[_T ]\d\d:\d\d:\d\d)\S*|host\s*:\s*(?P<ip>\S+)"
    r"|rank\s*:\s*(?P<rank>\d+)(?: \(local_rank: (?P<local_rank>\d+)\))?"
    r"|exitcode\s*:\s*(?P<exitcode>-?\d+)(?: \(pid: (?P<pid>\d+)\))?"
    r"|error_file\s*:\s*(?P<error_file>\S+))\s*$"
)
_ENTRY = re.compile(r"\s*\[\d+\]:\s*$")
_ROOT_SECTION, _OTHER_SECTION = (
    "Root Cause",
    ("Failures:", "Other Failures:"),
)  # torch <= 1.10: "Other Failures:"
_TABLE_TITLE = re.compile(r"\S.* FAILED\s*$")
ELASTIC_LINES = 8  # an entry's rows above its traceback row
TABLE_LINES = 400  # a table of every rank of a node, each with its traceback
MAX_LISTED = 6


@dataclass(frozen=True, slots=True)
class ElasticEntry:
    """One failure of torch elastic's table: its rows as fields, and whether torch named it the root."""

    fields: dict[str, str]
    root: bool
    head: int  # the index of its `[idx]:` line


def _entry_rows(lines: Sequence[str], index: int) -> tuple[dict[str, str], int | None]:
    """The rows of the entry whose rows end above `lines[index]`, and its `[idx]:` line (None: no entry)."""
    fields: dict[str, str] = {}
    for j in range(index - 1, max(-1, index - ELASTIC_LINES), -1):
        message = _message(lines[j])
        if _ENTRY.match(message):
            return fields, j
        m = _ELASTIC.match(message)
        if m is not None:
            for name, value in m.groupdict().items():
                if value is not None:
                    fields.setdefault(name, value)
    return fields, None


def _section(lines: Sequence[str], head: int) -> tuple[bool, int]:
    """Whether the entry at `head` is in the table's root section, and the table's title line."""
    root = None
    for j in range(head - 1, max(-1, head - TABLE_LINES), -1):
        message = _message(lines[j])
        if root is None and message.startswith(_ROOT_SECTION):
            root = True
        elif root is None and message.startswith(_OTHER_SECTION):
            root = False
        if _TABLE_TITLE.match(message):
            return bool(root), j
    return bool(root), max(0, head - TABLE_LINES)


def read_elastic_entry(lines: Sequence[str], index: int) -> ElasticEntry | None:
    """The entry of torch elastic's table whose rows end at `lines[index]` (None: not in a table)."""
    fields, head = _entry_rows(lines, index)
    if head is None:
        return None
    if "failed_at" in fields:  # `2026-12-01_10:00:05`: ordered with the other lines' stamps
        fields["failed_at"] = fields["failed_at"].replace("_", " ").replace("T", " ")
    root, _ = _section(lines, head)
    return ElasticEntry(fields, root, head)


def read_elastic_block(lines: Sequence[str], index: int) -> dict[str, str]:
    """The fields of the table entry whose rows end at `lines[index]` (empty: none); torch's root entry also
    lists the table's other failures (`also_failed`), and any other entry says it is not the root."""
    entry = read_elastic_entry(lines, index)
    if entry is None:
        return {}
    fields = dict(entry.fields)
    fields["elastic"] = "root" if entry.root else "other"
    if entry.root:
        others = _other_entries(lines, entry.head)
        if others:
            listed = "; ".join(_describe(e) for e in others[:MAX_LISTED])
            more = f" and {len(others) - MAX_LISTED} more" if len(others) > MAX_LISTED else ""
            fields["also_failed"] = f" (after it {len(others)} more failed: {listed}{more})"
    return fields


def _other_entries(lines: Sequence[str], root_head: int) -> list[dict[str, str]]:
    """The entries of the `Failures:` section of the table whose root entry starts at `root_head`."""
    _, title = _section(lines, root_head)
    out = []
    for j in range(title + 1, root_head):
        if _ENTRY.match(_message(lines[j])):
            rows: dict[str, str] = {}
            for k in range(j + 1, min(root_head, j + ELASTIC_LINES)):
                m = _ELASTIC.match(_message(lines[k]))
                if m is not None:
                    rows.update((n, v) for n, v in m.groupdict().items() if v is not None)
            if rows:
                out.append(rows)
    return out


def _describe(rows: dict[str, str]) -> str:
    where = f" on {rows['ip']}" if "ip" in rows else ""
    return (
        f"rank {rows.get('rank', '?')} (local rank {rows.get('local_rank', '?')}, pid {rows.get('pid', '?')})"
        f"{where} exit code {rows.get('exitcode', '?')}"
    )


# Ray's OOM killer (src/ray/raylet/node_manager.cc, `CreateOomKillMessageDetails`): since Ray 2.3 the sentence
# `Task was killed due to the node running low on memory.` ends its line and the detail follows on the next:
# `Memory on the node (IP: 10.0.3.9, ID: …) where the task (actor ID: …, name=MegatronTrainRayActor.__init__,
# pid=41017, memory used=182.40GB) was running was 1.9TB / 2.0TB (0.96), which exceeds …` (`task ID:` and a
# function's name for a task).
_MEMORY_DETAIL = re.compile(
    r"Memory on the node \(IP: (?P<ip>[\w.:]+), ID: (?P<node_id>\w+)\) where the task "
    r"\((?P<what>actor|task) ID: \w+, name=(?P<name>[\w.]+?)(?:\.(?P<method>\w+))?, pid=(?P<pid>\d+), "
    r"memory used=(?P<used>[\d.]+ ?[KMGT]?i?B)\) was running was (?P<node_used>[\d.]+ ?[KMGT]?i?B) / "
    r"(?P<node_total>[\d.]+ ?[KMGT]?i?B)"
)
DETAIL_LINES = 6  # the detail line, wrapped by a terminal or a paste


def read_memory_detail(lines: Sequence[str], index: int) -> dict[str, str]:
    """The fields of Ray's OOM detail on the lines after `lines[index]` (empty: none there)."""
    text = "".join(_message(line) for line in lines[index + 1 : index + 1 + DETAIL_LINES])
    m = _MEMORY_DETAIL.search(text)
    if m is None:
        return {}
    fields = {k: v for k, v in m.groupdict().items() if v is not None and k not in ("what", "name")}
    fields["actor" if m["what"] == "actor" else "task"] = m["name"]
    fields["usage"] = f": {m['node_used']} of {m['node_total']} RAM in use on that node"
    return fields
