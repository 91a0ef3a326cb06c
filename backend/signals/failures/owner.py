"""Whose line is it: the process a failure line belongs to, also when the line carries no Ray prefix.

A traceback's continuation lines often carry no prefix (the driver re-raises an actor's error and inlines
its traceback; a pasted log lost its prefixes; a terminal hard-wrapped a long line). The owner of such a
line is the prefixed line its traceback started with, or the actor Ray's `RayTaskError … ray::Actor.method()
(pid=, ip=)` line names; else the driver.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from backend.signals.actors import role_of
from backend.signals.grammar import ParsedLine, parse_line

WRAP_MIN = 80  # a line at least this long may have been hard-wrapped by a terminal or a paste
LOOKBACK = 200

# an exception's own detail lines count too (torch's NCCL errors: `ncclUnhandledCudaError: …`, `Last error:`)
_TRACE_BODY = re.compile(
    r"\s|During handling|The above exception|[\w.]+(?:Error|Exception)\b|File \"|Last error:"
)
# what opens a block of lines one process printed: a traceback, SGLang's scheduler, torch's async NCCL error
# (or any c10 error line: a paste's wrap may have put the words on the next line)
_TRACE_HEAD = re.compile(
    r"Traceback \(most recent call last\)|\s|.*Scheduler hit an exception"
    r"|.*raised the following async exception|\[rank\d+\]:\[[EF]"
)
# `ray.exceptions.RayTaskError(OutOfMemoryError):
# ray::MegatronTrainRayActor.train() (pid=4101, ip=10.0.0.3, ...`
REMOTE_TASK = re.compile(
    r"RayTaskError(?:\([\w.]*\))?:\s*ray::(?P<actor>\w+)\.\w+\(\)\s*\(pid=(?P<pid>\d+)"
    r"(?:,\s*ip=(?P<ip>[\w.:]+))?"
)
# What starts a new line in a log (anything else after a long line is that line's wrapped tail).
_LINE_START = re.compile(
    # a Ray prefix (`(MegatronTrainRayActor pid=…`, `(raylet`), never any `(` (a wrap may land before one)
    r"\((?:\w+ pid=\d|raylet|gcs_server|autoscaler|monitor|dashboard)"
    r"|\[|\^\[\[|Traceback|During handling|The above exception|\s{2}|\t|File "
    r"\"|`{3}|[\w.]+(?:Error|Exception|Warning)\b|\d{4}-\d\d-\d\d|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|"
    r"Job '|Status message|-{3}|\*|(?:critic-)?(?:step|rollout|perf|eval|multi_turn|passrate) \d+(?:: \{| "
    r"skipped:)|[A-Z][a-z]* [a-z]"  # a sentence ("A worker died …"); a wrap lands there rarely
    r"|[\w.-]+: (?:error|warning|fatal)\b"  # a tool's own line: `slurmstepd: error: …`, `srun: error: …`
)
# a capitalised sentence or message (`NCCL WARN …`, `GCS may have been killed`, `The Ray job …`) after a line
# that ended a sentence is a line of its own, never a wrapped tail: a wrap at that space leaves the space on
# one of the two pieces (`free. ` / `Process 4101 has`, or `free.` / ` Process …`)
_SENTENCE = re.compile(r"[A-Z][\w'/.-]*:? [A-Za-z(\[<]")
_SENTENCE_END = re.compile(r"[.!?;][\"')\]]?$")
_QUOTE = re.compile(r"(?:> ?)+")
_NEVER_FIRST = frozenset("]),;}")


def unquote(line: str) -> str:
    """A line without markdown's quote markers (`> `), as pasted logs in issues carry them."""
    return _QUOTE.sub("", line, count=1) if line.startswith(">") else line


@dataclass(frozen=True, slots=True)
class Wraps:
    """The widths a terminal hard-wrapped a pasted log at: lengths (of lines at least WRAP_MIN long) that
    several lines share. A wrapped line is exactly that long and its tail is no longer than it; a long line of
    another length is taken as wrapped only when a shorter line that starts like no log line follows it."""

    widths: frozenset[int] = frozenset()

    @classmethod
    def of(cls, lines: Sequence[str]) -> Wraps:
        counts = Counter(len(line) for line in lines if len(line) >= WRAP_MIN)
        return cls(frozenset(width for width, n in counts.items() if n >= 2))

    def continues(self, previous: str, line: str) -> bool:
        """Is `line` the hard-wrapped tail of `previous` (both as the log holds them)?"""
        if len(previous) < WRAP_MIN or not line:
            return False
        if line[0] in _NEVER_FIRST:  # a closing bracket starts no log line (the head's colour was stripped)
            return True
        if len(previous) not in self.widths and len(line) > len(previous) and len(line) not in self.widths:
            return False  # (a full-width piece after a shorter one: its head's colour codes were stripped)
        text = unquote(line) if line.startswith(">") else line
        if _LINE_START.match(text) is not None:
            return False
        return not (_SENTENCE.match(text) and _SENTENCE_END.search(previous))


NO_WRAPS = Wraps()


def traceback_owner(lines: Sequence[str], index: int, wraps: Wraps = NO_WRAPS) -> ParsedLine | None:
    """The process the prefix-less line `lines[index]` belongs to (None: the driver, or not a traceback)."""
    j = index - 1
    stop = max(-1, index - LOOKBACK)
    while j > stop:
        line = unquote(lines[j])
        if line.startswith("("):
            parsed = parse_line(line)
            if parsed.actor is not None and parsed.pid is not None:
                return parsed if _TRACE_HEAD.match(parsed.message) else None
        remote = REMOTE_TASK.search(line)
        if remote is not None:  # the driver's traceback inlines the actor's: Ray names that actor here
            return _remote_head(remote)
        if line.startswith("Traceback") or not _in_trace(line, lines, j, wraps):
            return None
        j -= 1
    return None


def _remote_head(remote: re.Match[str]) -> ParsedLine:
    """The traceback head of the actor a `RayTaskError … (pid=N, ip=…)` line names."""
    ip = f", ip={remote['ip']}" if remote["ip"] else ""
    return parse_line(f"({remote['actor']} pid={remote['pid']}{ip}) Traceback (most recent call last):")


def _in_trace(text: str, lines: Sequence[str], j: int, wraps: Wraps) -> bool:
    """Whether `text` (of `lines[j]`) is a traceback's body line, or the wrapped tail of the line above."""
    return bool(_TRACE_BODY.match(text)) or (j > 0 and wraps.continues(lines[j - 1], lines[j]))


def remote_owner(lines: Sequence[str], index: int, wraps: Wraps = NO_WRAPS) -> ParsedLine | None:
    """The actor whose error a traceback re-raises: the one Ray's `RayTaskError … ray::Actor.method() (pid=)`
    line above names, when the exception line at `index` ends such a traceback (whoever printed it: the
    driver, or an actor that called the failing one)."""
    j = index - 1
    stop = max(-1, index - LOOKBACK)
    while j > stop:
        line = unquote(lines[j])
        if j + 1 < len(lines) and wraps.continues(lines[j], lines[j + 1]):
            line += unquote(lines[j + 1])  # Ray's line a terminal wrapped before its `(pid=…)`
        message = parse_line(line).message if line.startswith("(") else line
        remote = REMOTE_TASK.search(message)
        if remote is not None:
            return _remote_head(remote)
        if message.startswith("Traceback") or not _in_trace(message, lines, j, wraps):
            return None
        j -= 1
    return None


def label(actor: str | None, pid: int | str | None, ip: str | None, proc: str | None = None) -> str:
    """How an operator reads a process: its Ray actor, pid and node, else miles' name, else the driver."""
    if actor is None:
        return proc or "the driver"
    role = role_of(actor, proc)
    who = f"{actor} pid={pid}" if pid is not None else actor
    if ip:
        who += f" on {ip}"
    return f"{who} ({role})" if role is not None and role not in actor.lower() else who


def line_label(line: ParsedLine | None) -> str:
    if line is None:
        return "the driver"
    return label(line.actor, line.pid, line.ip, line.proc)
