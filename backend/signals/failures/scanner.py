"""Find the catalog's failures in log text as real logs hold it: behind any Ray prefix or none, coloured,
hard-wrapped mid-token, quoted in markdown, repeated by Ray or by the job banner's replay of the tail.

Cost: per chunk one copy of the text without its line breaks (so a hint a terminal wrapped in two is still
one string) and one `str.find` per hint; only the few lines a hint points to are parsed.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from backend.signals.actors import ENGINE, role_of
from backend.signals.anchors import AnchoredHints
from backend.signals.failures.catalog import EXCEPTION_HINTS, FailureCatalog, FailureKind, default_catalog
from backend.signals.failures.events import FailureEvent
from backend.signals.failures.owner import (
    LOOKBACK,
    NO_WRAPS,
    Wraps,
    label,
    line_label,
    remote_owner,
    traceback_owner,
    unquote,
)
from backend.signals.grammar import METRIC_LOOKING, METRIC_NEEDLES, ParsedLine, parse_line

if TYPE_CHECKING:
    from backend.signals.prefilter import Scan

MAX_WRAPPED = 6  # physical lines one logical line may span
LINE_CHARS = 400  # of the line kept as the sample
MAX_EVENTS = 500  # distinct failures kept per run (a cascade on 128 GPUs is dozens)

# `ModuleNotFoundError: No module named 'x'`, `torch.OutOfMemoryError: …`, `KeyboardInterrupt`
EXCEPTION_LINE = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)(?:\([\w.]*\))?(?::\s.*)?$"
)
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<lineno>\d+), in (?P<func>\S+)')
_TRACE_CONTEXT = re.compile(r"\s|File \"|Traceback \(most recent call last\)")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?")
_GLOG_STAMP = re.compile(r"\[[EWIF]\d{3,4} (\d\d:\d\d:\d\d(?:\.\d+)?)")  # torch pads no month: `[E301 …`
_RANK_TAG = re.compile(r"\[rank(\d+)\]:")
FRAME_LOOK = 60
RANK_CENSUS = "[rank"  # torch's `[rank12]:` tags: which ranks the log has heard of


class FailureScanner:
    """Feeds on sanitised chunks of complete lines; keeps every failure seen, merged with its repeats."""

    def __init__(self, catalog: FailureCatalog | None = None) -> None:
        self.catalog = catalog or default_catalog()
        self.events: list[FailureEvent] = []
        self.started = False  # a metric line was seen: errors after it are not "at start"
        self.succeeded = False  # Ray said the job succeeded
        self.ranks_seen: set[int] = set()
        self.version = 0  # bumped when an event is added or changed
        self._by_key: dict[tuple[str, ...], FailureEvent] = {}
        self._open: dict[str, FailureEvent] = {}  # process -> its event waiting for the traceback's exception
        self._tail: list[str] = []  # the previous chunk's last lines, for tracebacks that span chunks
        self._lines_before = 0
        self._hints = [(hint, kind) for kind in self.catalog.specific for hint in kind.hints]
        self._anchors = AnchoredHints([hint for hint, _ in self._hints])

    # ------------------------------------------------------------------ input

    def feed(self, text: str, scan: Scan | None = None) -> list[FailureEvent]:
        """Scan one chunk; returns the events it added or changed (copies). `scan`: the monitor's prefilter
        already searched the chunk for every hint (backend.signals.prefilter), so it is not searched again."""
        quoted = text.startswith(">") or "\n>" in text
        lines: list[str] | None = None
        if quoted:  # a paste quoted in markdown: its markers would split a wrapped hint
            lines = _split(text)
            flat = "".join(unquote(line) for line in lines)
            scan = None
        hits: dict[int, list[FailureKind | None]] = {}  # flat position -> kinds whose hint starts there
        if scan is not None:
            flat = scan.flat
            for hint, kind in self._hints:
                for pos in scan.positions(hint) if scan.has(hint) else ():
                    hits.setdefault(pos, []).append(kind)
        else:
            flat = flat if quoted else text.replace("\n", "")
            found = self._anchors.find_all(flat)
            for hint, kind in self._hints:
                for pos in found.get(hint, ()):
                    hits.setdefault(pos, []).append(kind)
        if self.catalog.generic is not None:
            for hint in EXCEPTION_HINTS:
                if scan is not None and not scan.has(hint):
                    continue
                for pos in scan.positions(hint) if scan is not None else _find_all(flat, hint):
                    hits.setdefault(pos, []).append(None)
        census = scan.has(RANK_CENSUS) if scan is not None else RANK_CENSUS in flat
        ended_well = any(
            (scan.has(hint) if scan is not None else hint in flat) for hint in self.catalog.succeeded
        )
        if not hits and not census and not ended_well:
            self._advance(text, scan=scan)
            return []
        if lines is None:
            lines = _split(text)
        lengths = (len(unquote(line)) for line in lines) if quoted else map(len, lines)
        starts = list(itertools.accumulate(lengths, initial=0))
        if census:
            self._count_ranks(lines)
        if ended_well:
            self.succeeded = self.succeeded or any(
                h in line
                for line in lines
                for h in self.catalog.succeeded
                if ("Job '" in line or "status" in line)
            )
        by_line: dict[int, list[FailureKind | None]] = {}
        for pos, kinds in hits.items():
            by_line.setdefault(bisect.bisect_right(starts, pos) - 1, []).extend(kinds)
        first_metric = self._first_metric_line(text, starts) if not self.started else -1
        context = self._tail + lines
        base = len(self._tail)
        wraps = Wraps.of(context)
        changed: dict[int, FailureEvent] = {}
        done: set[int] = set()
        for i in sorted(by_line):
            first, last = _logical_bounds(context, base + i, wraps)
            if first in done:
                continue
            done.add(first)
            at_start = not self.started and (first_metric < 0 or i < first_metric)
            for event in self._scan_line(context, first, last, by_line[i], at_start, wraps):
                changed[id(event)] = event
        if first_metric >= 0:
            self.started = True
        self._advance(text, lines)
        return [e.frozen() for e in changed.values()]

    def _advance(self, text: str, lines: list[str] | None = None, scan: Scan | None = None) -> None:
        if lines is None:
            if (
                not self.started
                and any((scan.has(n) if scan is not None else n in text) for n in METRIC_NEEDLES)
                and METRIC_LOOKING.search(text)
            ):
                self.started = True
            count = text.count("\n")
            tail = text[-LOOKBACK * 200 :].split("\n")[:-1] if count else []
        else:
            count, tail = len(lines), lines
        self._lines_before += count
        self._tail = (self._tail + tail)[-LOOKBACK:]

    def _first_metric_line(self, text: str, starts: Sequence[int]) -> int:
        if not any(n in text for n in METRIC_NEEDLES):
            return -1
        m = METRIC_LOOKING.search(text)
        if m is None:
            return -1
        line = text.count("\n", 0, m.start())
        return line

    def _count_ranks(self, lines: list[str]) -> None:
        for line in lines:
            if RANK_CENSUS in line:
                m = _RANK_TAG.search(line)
                if m is not None:
                    self.ranks_seen.add(int(m.group(1)))

    # ------------------------------------------------------------------ one logical line

    def _scan_line(
        self,
        context: list[str],
        first: int,
        last: int,
        kinds: list[FailureKind | None],
        at_start: bool,
        wraps: Wraps,
    ) -> list[FailureEvent]:
        pieces = [unquote(context[j]) for j in range(first, last + 1)]
        if self._retried(context, last):
            return []
        out: list[FailureEvent] = []
        matched = False
        seen: set[str] = set()
        for kind in kinds:
            if kind is None or kind.id in seen:
                continue
            seen.add(kind.id)
            found = _match(kind, pieces)
            if found is None:
                continue
            matched = True
            parsed, m, template = found
            event = self._record(kind, parsed, m, template, context, first, at_start, wraps)
            if event is not None:
                out.append(event)
        if None in kinds:
            parsed = parse_line("".join(pieces))
            message = parsed.message.strip()
            if EXCEPTION_LINE.match(message) and _in_traceback(context, first, last, wraps):
                owner = remote_owner(context, first, wraps) or (
                    parsed if parsed.actor is not None else traceback_owner(context, first, wraps)
                )
                waiting = self._open.pop(_process_key(owner), None)
                if waiting is not None:
                    waiting.error = message[:LINE_CHARS]
                    waiting.frame = waiting.frame or innermost_frame(context, first, wraps)
                    self.version += 1
                    out.append(waiting)
                elif not matched and self.catalog.generic is not None:
                    event = self._record(
                        self.catalog.generic,
                        parsed,
                        None,
                        None,
                        context,
                        first,
                        at_start,
                        wraps,
                        error=message,
                    )
                    if event is not None:
                        out.append(event)
        return out

    def _retried(self, context: list[str], last: int) -> bool:
        """A caught and retried error (the line itself or the two after it say so) is not a failure."""
        window = context[max(0, last - MAX_WRAPPED) : last + 3]
        return any(word in line for line in window for word in self.catalog.retried)

    def _record(
        self,
        kind: FailureKind,
        parsed: ParsedLine,
        m: re.Match[str] | None,
        template: str | None,
        context: list[str],
        first: int,
        at_start: bool,
        wraps: Wraps,
        *,
        error: str | None = None,
    ) -> FailureEvent | None:
        owner = remote_owner(context, first, wraps) or (
            parsed if parsed.actor is not None else traceback_owner(context, first, wraps)
        )
        groups = {k: v.strip() for k, v in (m.groupdict() if m else {}).items() if v is not None}
        for name in [k for k in groups if k.endswith("_alt")]:  # a second spelling fills the first's field
            groups.setdefault(name[: -len("_alt")], groups.pop(name))
        named = "actor" in groups  # the line names the failing actor itself (RayTaskError, the OOM killer)
        if named:  # then the process that printed it (the driver, the raylet) is not the one that failed
            owner = None
        actor = groups.get("actor") or (owner.actor if owner else None)
        pid = groups.get("pid") or (str(owner.pid) if owner and owner.pid is not None else None)
        ip = groups.get("ip") or (owner.ip if owner else None)
        tags = parsed.tags or (owner.tags if owner else None)
        rank = groups.get("rank") or _rank_of(parsed, owner)
        who = label(actor, pid, ip) if named else line_label(owner)
        role = (
            role_of(actor, owner.proc if owner and not named else None)
            if actor
            else (role_of(None, owner.proc) if owner else "driver")
        )
        if tags and (role is None or role == "driver"):
            role = ENGINE
        fields = {**dict(kind.defaults), **groups}
        for name, value in (("actor", actor), ("pid", pid), ("ip", ip), ("tags", tags), ("rank", rank)):
            if value is not None:
                fields[name] = str(value)
        fields["text"] = " ".join(parsed.message.split())[:LINE_CHARS]
        key = (kind.id, *(fields.get(g, "") for g in kind.group_by))
        existing = self._by_key.get(key) or self._covering(kind, key)
        if existing is not None:
            existing.count += parsed.repeat
            existing.max_repeat = max(existing.max_repeat, parsed.repeat)
            if named and not existing.named:  # this sighting names the actor that failed: it says more
                existing.fields, existing.who, existing.role, existing.named = (
                    {**existing.fields, **fields},
                    who,
                    role,
                    True,
                )
                existing.template, existing.line = template, " ".join(parsed.message.split())[:LINE_CHARS]
            self._collect(kind, existing, fields)
            if error and not existing.error:
                existing.error = error[:LINE_CHARS]
            self.version += 1
            return existing
        if len(self.events) >= MAX_EVENTS:
            return None
        joined = " ".join("".join(unquote(context[j]) for j in range(first, first + 1)).split())
        event = FailureEvent(
            kind=kind.id,
            seq=self._lines_before - len(self._tail) + first,
            fields=fields,
            role=role,
            who=who,
            time=_time_of(parsed, joined),
            line=" ".join(parsed.message.split())[:LINE_CHARS] or joined[:LINE_CHARS],
            frame=innermost_frame(context, first, wraps),
            error=error[:LINE_CHARS] if error else None,
            at_start=at_start,
            count=parsed.repeat,
            max_repeat=parsed.repeat,
            named=named,
            template=template,
        )
        self._collect(kind, event, fields)
        if kind.needs_exception:
            self._open[_process_key(owner)] = event
        self.events.append(event)
        self._by_key[key] = event
        self.version += 1
        return event

    def _covering(self, kind: FailureKind, key: tuple[str, ...]) -> FailureEvent | None:
        """A sighting that says less (`RayTaskError(…) … CUDA out of memory.` without the GPU) is the event
        that said more about the same process."""
        if "" not in key[1:]:
            return None
        for known, event in self._by_key.items():
            if known[0] == kind.id and all(
                v == "" or v == k for v, k in zip(key[1:], known[1:], strict=True)
            ):
                return event
        return None

    @staticmethod
    def _collect(kind: FailureKind, event: FailureEvent, fields: dict[str, str]) -> None:
        for name in kind.collect:
            value = fields.get(name)
            if value is not None and value not in event.collected.setdefault(name, []):
                event.collected[name].append(value)


# ---------------------------------------------------------------- helpers


def _split(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _find_all(text: str, needle: str) -> list[int]:
    out = []
    pos = text.find(needle)
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + len(needle))
    return out


def _logical_bounds(lines: Sequence[str], index: int, wraps: Wraps) -> tuple[int, int]:
    """The physical lines of the logical line `lines[index]` belongs to (a terminal's hard wraps undone)."""
    first = index
    while first > 0 and index - first < MAX_WRAPPED and wraps.continues(lines[first - 1], lines[first]):
        first -= 1
    last = index
    while (
        last + 1 < len(lines) and last - first < MAX_WRAPPED and wraps.continues(lines[last], lines[last + 1])
    ):
        last += 1
    return first, last


def _match(kind: FailureKind, pieces: list[str]) -> tuple[ParsedLine, re.Match[str], str | None] | None:
    """The kind's first pattern that matches the logical
    line: wraps undone mid-token first, then at a space."""
    for joiner in ("", " "):
        parsed = parse_line(joiner.join(pieces))
        for pattern in kind.patterns:
            m = pattern.regex.search(parsed.message)
            if m is not None:
                return parsed, m, pattern.message
        if len(pieces) == 1:
            break
    return None


def _in_traceback(lines: Sequence[str], first: int, last: int, wraps: Wraps) -> bool:
    """An exception line ends a traceback (a frame or code
    line before it), or starts one pasted newest-first."""
    before = first - 1
    while before > 0 and first - before < MAX_WRAPPED and wraps.continues(lines[before - 1], lines[before]):
        before -= 1  # the start of the (wrapped) line before
    for j in (before, last + 1):
        if 0 <= j < len(lines):
            message = parse_line(unquote(lines[j])).message
            if _TRACE_CONTEXT.match(message):
                return True
    return False


def innermost_frame(lines: Sequence[str], index: int, wraps: Wraps = NO_WRAPS) -> str | None:
    """The traceback's innermost frame (`file:line in func`) above the exception line, or below it when the
    log was pasted newest-first."""
    for step in (-1, 1):
        j = index + step
        for _ in range(FRAME_LOOK):
            if not 0 <= j < len(lines):
                break
            line = unquote(lines[j])
            if j + 1 < len(lines) and wraps.continues(lines[j], lines[j + 1]):
                line += unquote(lines[j + 1])  # a frame line a terminal wrapped
            m = FRAME.search(line)
            if m is not None:
                return f"{m['file']}:{m['lineno']} in {m['func']}"
            if "Traceback (most recent call last)" in line:
                break
            j += step
    return None


def _process_key(owner: ParsedLine | None) -> str:
    if owner is None:
        return "driver"
    return f"{owner.actor}:{owner.pid}:{owner.ip}" if owner.pid is not None else line_label(owner)


def _rank_of(parsed: ParsedLine, owner: ParsedLine | None) -> str | None:
    for line in (parsed, owner):
        if line is not None and line.rank is not None:
            return str(line.rank)
    m = _RANK_TAG.search(parsed.message)
    return m.group(1) if m else None


def _time_of(parsed: ParsedLine, line: str) -> str | None:
    if parsed.ts:
        return parsed.ts
    m = _STAMP.search(line)
    if m is not None:
        return m.group(0)
    g = _GLOG_STAMP.search(line)
    return g.group(1) if g else None
