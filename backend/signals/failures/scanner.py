"""Find the catalog's failures in log text as real logs hold it: behind any Ray prefix or none, coloured,
hard-wrapped mid-token, quoted in markdown, repeated by Ray or by the job banner's replay of the tail.

Cost: per chunk one copy of the text without its line breaks (so a hint a terminal wrapped in two is still
one string) and one `str.find` per hint; only the few lines a hint points to are parsed.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.signals.actors import DRIVER, ENGINE, TRAIN, frame_role, is_internal, role_of
from backend.signals.anchors import AnchoredHints
from backend.signals.failures.actor_block import (
    BLOCK_LINES,
    read_block,
    read_elastic_block,
    read_memory_detail,
)
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
from backend.signals.failures.stalls import PhaseWatch, Stall
from backend.signals.grammar import METRIC_LOOKING, METRIC_NEEDLES, ParsedLine, parse_line
from backend.signals.metrics import parse_ts
from backend.signals.prefilter import LineNumbers

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
# a source line under a frame, behind any Ray prefix, colour or quote: indented code (`    raise X(…)`)
_CODE = re.compile(r"(?:> ?)?(?:(?:\x1b|\^\[)\[[\d;]*m|\([^()]*\) ?)*\s{4}\S")
_TRACE_CONTEXT = re.compile(r"\s|File \"|Traceback \(most recent call last\)")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?")
_GLOG_STAMP = re.compile(r"\[[EWIF]\d{3,4} (\d\d:\d\d:\d\d(?:\.\d+)?)")  # torch pads no month: `[E301 …`
_RANK_TAG = re.compile(r"\[rank(\d+)\]:")
_RAY_PREFIX = re.compile(r"\((?P<actor>\w+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^()\s]+))?\)")
# a `[rankN]:` line that shows the rank alive: not an error/fatal c10 line, nothing of NCCL's teardown
_RANK_ALIVE = re.compile(r"\[rank(\d+)\]:(?!\s*\[[EF])(?!.*(?:[Ww]atchdog|timed out|[Tt]imeout))")
_GROUP = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\]\s(]+)(?:\((?P<desc>\w+)\))?)? Rank (?P<rank>\d+)\]"
)
_GROUP_RANK = re.compile(r"\[Rank (\d+)\]")
# progress a run makes: a later train step, rollout or eval says it outlived an error before it
_PROGRESS = re.compile(r"(?m)(?:^|[-\]):>] )((?:critic-)?(?:step|rollout|eval) \d+)\Z")
PROGRESS_TAIL = ": {"
FRAME_LOOK = 60
RANK_CENSUS = "[rank"
TIMER_NEEDLE = "Timer "  # miles' phase lines (the monitor's prefilter has it: rank_phases reads them too)
RAY_DAEMONS = (
    "raylet",
    "gcs_server",
    "autoscaler",
    "monitor",
    "dashboard",
)  # Ray's own: never the failed one
STALL = "stall"  # torch's `[rank12]:` tags: which ranks the log has heard of


class FailureScanner:
    """Feeds on sanitised chunks of complete lines; keeps every failure seen, merged with its repeats."""

    def __init__(self, catalog: FailureCatalog | None = None) -> None:
        self.catalog = catalog or default_catalog()
        self.events: list[FailureEvent] = []
        self.started = False  # a metric line was seen: errors after it are not "at start"
        self.succeeded = False  # Ray said the job succeeded
        self.ranks_seen: set[int] = set()
        # rank -> the last line (number, c10 time) that showed it alive
        self.ranks_alive: dict[int, tuple[int, str | None]] = {}
        self.progress: list[tuple[int, str]] = []  # (line number, "step 6"): the run's progress lines
        self.version = 0  # bumped when an event is added or changed
        self._by_key: dict[tuple[str, ...], FailureEvent] = {}
        self._process_ranks: dict[tuple[str, str], str] = {}  # a train actor's (pid, ip) -> its `[rankN]:`
        self._open: dict[str, FailureEvent] = {}  # process -> its event waiting for the traceback's exception
        self._pending: list[_Pending] = []  # ActorDiedErrors whose field block may go on in the next chunk
        self._phases = PhaseWatch(self.catalog.stall)  # miles' open Timer phases: a stall before an error
        self._stall_checked: set[tuple[str, int]] = set()  # failures already asked whether a stall came first
        self._tail: list[str] = []  # the previous chunk's last lines, for tracebacks that span chunks
        self._lines_before = 0
        self._hints = [(hint, kind) for kind in self.catalog.specific for hint in kind.hints]
        self._anchors = AnchoredHints([hint for hint, _ in self._hints])

    @property
    def lines_read(self) -> int:
        return self._lines_before

    # ------------------------------------------------------------------ input

    def feed(self, text: str, scan: Scan | None = None) -> list[FailureEvent]:
        """Scan one chunk; returns the events it added or changed (copies). `scan`: the monitor's prefilter
        already searched the chunk for every hint (backend.signals.prefilter), so it is not searched again."""
        if scan is not None:
            self._prime(scan)
        self._note_progress(text, scan)
        lines: list[str] | None = None
        if _quoted(text):  # quoted in markdown: its markers would split a hint
            lines, scan = _split(text), None
            flat = "".join(unquote(line) for line in lines)
        else:
            # where the scan answers, no reader below reads the flat text (hyperscan's scan made no copy)
            flat = "" if scan is not None else text.replace("\n", "")
        self._note_phases(text, lines, flat, scan)
        hits = self._hits(flat, scan)
        census = _has(RANK_CENSUS, flat, scan)
        ended_well = any(_has(hint, flat, scan) for hint in self.catalog.succeeded)
        if not hits and not census and not ended_well and not self._pending:
            self._advance(text, scan=scan)
            return []
        return self._read_hits(text, lines, hits, census, ended_well)

    def _prime(self, scan: Scan) -> None:
        """The lines both the progress and the Timer readers number, counted in one pass."""
        timers = scan.at.get(TIMER_NEEDLE, ()) if self._phases.rule.phases else ()
        scan.numbers.prime(scan.at.get(PROGRESS_TAIL, ()), timers)

    def _read_hits(
        self,
        text: str,
        lines: list[str] | None,
        hits: dict[int, list[FailureKind | None]],
        census: bool,
        ended_well: bool,
    ) -> list[FailureEvent]:
        """A chunk where something was found, read line by line (`lines`: its markdown-unquoted lines)."""
        quoted = lines is not None
        lines = lines if lines is not None else _split(text)
        if census:
            self._count_ranks(lines)
        if ended_well:
            self._note_success(lines)
        changed = self._scan_chunk(text, lines, hits, quoted=quoted)
        changed += [e for e in self._fill_ranks() if e not in changed]
        changed += [e for e in self._fill_from_tables() if e not in changed]
        self._advance(text, lines)
        return [e.frozen() for e in changed]

    def _note_phases(self, text: str, lines: list[str] | None, flat: str, scan: Scan | None) -> None:
        if not self._phases.rule.phases:
            return
        self._phases.note_chunk(text)
        if _has(TIMER_NEEDLE, flat, scan):
            if lines is None and scan is not None:  # only the lines the scan found it on, not every line
                self._phases.note_numbered(
                    _lines_holding(text, scan.at.get(TIMER_NEEDLE, ()), scan.numbers), self._lines_before
                )
            else:
                self._phases.note_lines(lines if lines is not None else _split(text), self._lines_before)

    def _stalls(self, changed: list[FailureEvent]) -> list[FailureEvent]:
        """A stall event for the open phase an error came after (once per phase)."""
        out = []
        for event in changed:
            if event.kind == STALL or (event.kind, event.seq) in self._stall_checked:
                continue
            self._stall_checked.add((event.kind, event.seq))
            made = self._add_stall(self._phases.stalled(event.seq, _stamp_of(event.time), self.progress))
            if made is not None:
                out.append(made)
        return out

    def stall_at_end(self) -> list[FailureEvent]:
        """The run is over (failed, stopped, or a saved log read whole) and its log simply ends while a phase
        stands still, with no error after it: that stall (once per phase; copies), else nothing."""
        made = self._add_stall(self._phases.stalled_at_end(self._lines_before + 1, self.progress))
        return [] if made is None else [made.frozen()]

    def _add_stall(self, stall: Stall | None) -> FailureEvent | None:
        if stall is None or len(self.events) >= MAX_EVENTS:
            return None
        self._phases.reported.add(stall.phase.seq)
        made = _stall_event(stall, self._phases.rule.at_end if stall.at_end else None)
        self.events.append(made)
        self._by_key[(STALL, str(made.seq))] = made
        self.version += 1
        return made

    def _hits(self, flat: str, scan: Scan | None) -> dict[int, list[FailureKind | None]]:
        """Flat position -> the kinds whose hint starts there (None: an exception line's generic hint)."""
        hits: dict[int, list[FailureKind | None]] = {}
        found = scan.positions if scan is not None else self._anchors.find_all(flat).get
        for hint, kind in self._hints:
            if scan is None or scan.has(hint):
                for pos in found(hint) or ():
                    hits.setdefault(pos, []).append(kind)
        if self.catalog.generic is not None:
            for hint in EXCEPTION_HINTS:
                if scan is None or scan.has(hint):
                    for pos in scan.positions(hint) if scan is not None else _find_all(flat, hint):
                        hits.setdefault(pos, []).append(None)
        return hits

    def _note_success(self, lines: list[str]) -> None:
        self.succeeded = self.succeeded or any(
            h in line
            for line in lines
            for h in self.catalog.succeeded
            if ("Job '" in line or "status" in line)
        )

    def _scan_chunk(
        self, text: str, lines: list[str], hits: dict[int, list[FailureKind | None]], *, quoted: bool
    ) -> list[FailureEvent]:
        lengths = (len(unquote(line)) for line in lines) if quoted else map(len, lines)
        starts = list(itertools.accumulate(lengths, initial=0))
        by_line: dict[int, list[FailureKind | None]] = {}
        for pos, kinds in hits.items():
            by_line.setdefault(bisect.bisect_right(starts, pos) - 1, []).extend(kinds)
        first_metric = self._first_metric_line(text) if not self.started else -1
        context = self._tail + lines
        wraps = Wraps.of(context)
        changed: dict[int, FailureEvent] = {}
        for first, (last, i, kinds) in _logical_lines(context, len(self._tail), by_line, wraps).items():
            at_start = not self.started and (first_metric < 0 or i < first_metric)
            for event in self._scan_line(context, first, last, kinds, at_start, wraps):
                changed[id(event)] = event
        for event in self._reread_blocks(context, wraps):
            changed[id(event)] = event
        for event in self._stalls(list(changed.values())):
            changed[id(event)] = event
        if first_metric >= 0:
            self.started = True
        return list(changed.values())

    def _reread_blocks(self, context: list[str], wraps: Wraps) -> list[FailureEvent]:
        """An ActorDiedError whose field block was cut by the chunk's end: read again with the lines since."""
        out, keep = [], []
        for pending in self._pending:
            index = pending.seq - (self._lines_before - len(self._tail))
            if index < 0:
                continue  # gone from the look-back: what was read stays
            found = _identify(pending.kind, pending.parsed, pending.match, context, index, wraps)
            event = pending.event
            if event.named and not found.named:
                continue  # a later sighting named the failed actor (the raylet's OOM line, then Ray's error)
            if found.fields != event.fields:
                key = (pending.kind.id, *(found.fields.get(g, "") for g in pending.kind.group_by))
                if self._by_key.get(pending.key) is event:
                    del self._by_key[pending.key]
                self._by_key.setdefault(key, event)
                event.fields, event.who, event.role = found.fields, found.who, found.role
                event.named = found.named
                pending = dataclasses.replace(pending, key=key)
                self.version += 1
                out.append(event)
            if len(context) - index <= BLOCK_LINES:
                keep.append(pending)
        self._pending = keep
        return out

    def _advance(self, text: str, lines: list[str] | None = None, scan: Scan | None = None) -> None:
        if lines is None:
            if (
                not self.started
                and any((scan.has(n) if scan is not None else n in text) for n in METRIC_NEEDLES)
                and METRIC_LOOKING.search(text)
            ):
                self.started = True
            count = scan.numbers.total if scan is not None else text.count("\n")
            tail = text[-LOOKBACK * 200 :].split("\n")[:-1] if count else []
        else:
            count, tail = len(lines), lines
        self._lines_before += count
        self._tail = (self._tail + tail)[-LOOKBACK:]

    def _first_metric_line(self, text: str) -> int:
        if not any(n in text for n in METRIC_NEEDLES):
            return -1
        m = METRIC_LOOKING.search(text)
        if m is None:
            return -1
        line = text.count("\n", 0, m.start())
        return line

    def _note_progress(self, text: str, scan: Scan | None) -> None:
        """Progress lines, by line number: what tells an incident the run outlived from a cause of death."""
        if PROGRESS_TAIL not in text:
            return
        numbers = scan.numbers if scan is not None else LineNumbers(text)  # one count shared by the readers
        for tail, m in _progress_in(text, scan.starts(PROGRESS_TAIL) if scan is not None else None):
            self.progress.append((self._lines_before + numbers.before(tail), m.group(1)))

    def _count_ranks(self, lines: list[str]) -> None:
        for i, line in enumerate(lines):
            if RANK_CENSUS in line:
                m = _RANK_TAG.search(line)
                if m is not None:
                    self.ranks_seen.add(int(m.group(1)))
                    self._note_process_rank(line, m)
                alive = _RANK_ALIVE.search(line)
                if alive is not None:
                    stamp = _GLOG_STAMP.search(line)
                    self.ranks_alive[int(alive.group(1))] = (
                        self._lines_before + i,
                        stamp.group(1)[:8] if stamp else None,
                    )

    def _note_process_rank(self, line: str, tag: re.Match[str]) -> None:
        """A train actor's `[rankN]:` tag is its global rank (an engine's is its own group's: never taken)."""
        p = _RAY_PREFIX.search(line, 0, tag.start())
        if p is not None and role_of(p["actor"]) == TRAIN:
            self._process_ranks.setdefault((p["pid"], p["ip"] or ""), tag.group(1))

    def _fill_ranks(self) -> list[FailureEvent]:
        """A train process's failure whose own lines carry no `[rankN]:` tag (a traceback, NCCL's WARN and
        Last error text) gets the global rank another line of that process showed."""
        if not self._process_ranks:
            return []
        filled = []
        for event in self.events:
            pid = event.fields.get("pid")
            rank = self._process_ranks.get((pid or "", event.fields.get("ip", "")))
            if rank is not None and "rank" not in event.fields:
                event.fields["rank"] = rank
                filled.append(event)
        self.version += bool(filled)
        return filled

    def _fill_from_tables(self) -> list[FailureEvent]:
        """A rank's own error whose lines name no host or pid (torchrun's child prints no Ray prefix) gets
        them from torch elastic's table entry of that rank."""
        entries = {
            e.fields["rank"]: e.fields
            for e in self.events
            if e.fields.get("elastic") and "rank" in e.fields and "ip" in e.fields
        }
        filled = []
        for event in self.events if entries else ():
            table = entries.get(event.fields.get("rank", ""))
            if table is None or "elastic" in event.fields or "ip" in event.fields:
                continue
            if event.fields.get("pid", table.get("pid")) != table.get("pid"):
                continue  # another process of that rank number (an engine's own group)
            event.fields.update((k, table[k]) for k in ("ip", "pid") if k in table)
            filled.append(event)
        self.version += bool(filled)
        return filled

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
        if self._retried(context, first, last) or _source_line(context, first):
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
            event = self._exception_line("".join(pieces), context, first, last, matched, at_start, wraps)
            if event is not None:
                out.append(event)
        return out

    def _exception_line(
        self,
        joined: str,
        context: list[str],
        first: int,
        last: int,
        matched: bool,
        at_start: bool,
        wraps: Wraps,
    ) -> FailureEvent | None:
        """An exception line ending a traceback: the error of its process's event waiting for one, else
        (no kind matched the line) the generic kind's event."""
        parsed = parse_line(joined)
        message = parsed.message.strip()
        if not (EXCEPTION_LINE.match(message) and _in_traceback(context, first, last, wraps)):
            return None
        owner = remote_owner(context, first, wraps) or (
            parsed if parsed.actor is not None else traceback_owner(context, first, wraps)
        )
        waiting = self._open.pop(_process_key(owner), None)
        if waiting is not None:
            waiting.error = message[:LINE_CHARS]
            waiting.frame = waiting.frame or innermost_frame(context, first, wraps)
            self.version += 1
            return waiting
        if matched or self.catalog.generic is None:
            return None
        return self._record(
            self.catalog.generic, parsed, None, None, context, first, at_start, wraps, error=message
        )

    def _retried(self, context: list[str], first: int, last: int) -> bool:
        """A caught and retried error is not a failure: the line itself says so, or one of the two after it
        said by the same process (another process's "retrying" clears nothing of this one)."""
        retried = self.catalog.retried
        if any(word in context[j] for j in range(first, last + 1) for word in retried):
            return True
        own = _process_of(context[first])
        return any(
            any(word in context[j] for word in retried) and _process_of(context[j]) == own
            for j in range(last + 1, min(len(context), last + 3))
        )

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
        found = _identify(kind, parsed, m, context, first, wraps)
        key = (kind.id, *(found.fields.get(g, "") for g in kind.group_by))
        existing = self._by_key.get(key) or self._covering(kind, key)
        if existing is not None:
            _merge(existing, kind, found, parsed, template, error)
            self.version += 1
            return existing
        if len(self.events) >= MAX_EVENTS:
            return None
        joined = " ".join(unquote(context[first]).split())
        event = FailureEvent(
            kind=kind.id,
            seq=self._lines_before - len(self._tail) + first,
            fields=found.fields,
            role=found.role,
            who=found.who,
            time=found.fields.get("failed_at") or _time_of(parsed, joined),
            line=" ".join(parsed.message.split())[:LINE_CHARS] or joined[:LINE_CHARS],
            frame=found.frame,
            error=error[:LINE_CHARS] if error else None,
            at_start=at_start,
            count=parsed.repeat,
            max_repeat=parsed.repeat,
            named=found.named,
            template=template,
        )
        _collect(kind, event, found.fields)
        if kind.needs_exception:
            self._open[_process_key(found.owner)] = event
        if kind.actor_block and len(context) - first <= BLOCK_LINES:  # its block may go on in the next chunk
            self._pending.append(_Pending(event, kind, parsed, m, event.seq, key))
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


# ---------------------------------------------------------------- who failed


@dataclass(frozen=True, slots=True)
class _Pending:
    """An event whose ActorDiedError block the chunk cut: what it takes to read it again."""

    event: FailureEvent
    kind: FailureKind
    parsed: ParsedLine
    match: re.Match[str] | None
    seq: int  # the header's line number in the log
    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Found:
    """Who a failure line is about: its fields, the process as an operator reads it, its role and frame."""

    fields: dict[str, str]
    who: str
    role: str | None
    named: bool  # the line (or its ActorDiedError block) names the failing actor, not only the printer
    owner: ParsedLine | None  # the process that printed it, when that is the one that failed
    frame: str | None


def _groups(kind: FailureKind, m: re.Match[str] | None, context: Sequence[str], first: int) -> dict[str, str]:
    groups = {k: v.strip() for k, v in (m.groupdict() if m else {}).items() if v is not None}
    for name in [k for k in groups if k.endswith("_alt")]:  # a second spelling fills the first's field
        groups.setdefault(name[: -len("_alt")], groups.pop(name))
    if kind.actor_block:
        block = read_block(context, first)
        if block is not None:
            groups = block.merged(groups)
    if kind.memory_detail and "pid" not in groups:
        groups = {**read_memory_detail(context, first), **groups}
    if kind.elastic_block:
        groups = {**read_elastic_block(context, first), **groups}
    return groups


def _identify(
    kind: FailureKind,
    parsed: ParsedLine,
    m: re.Match[str] | None,
    context: Sequence[str],
    first: int,
    wraps: Wraps,
) -> _Found:
    owner = remote_owner(context, first, wraps) or (
        parsed if parsed.actor is not None else traceback_owner(context, first, wraps)
    )
    groups = _groups(kind, m, context, first)
    named = "actor" in groups  # the line names the failing actor itself (RayTaskError, the OOM killer)
    if named:  # then the process that printed it (the driver, the raylet) is not the one that failed
        owner = None
    unnamed = False
    if kind.names_pid and not named:
        owner, unnamed = _pid_owner(owner, context, first, groups)
    who_fields = _who_fields(parsed, owner, groups)
    _group_fields(parsed.message, groups)
    frames = traceback_frames(context, first, wraps)
    role = (
        None if unnamed else _role(who_fields["actor"], None if named else owner, who_fields["tags"], frames)
    )
    fields = {**dict(kind.defaults), **groups}
    fields.update((name, str(value)) for name, value in who_fields.items() if value is not None)
    fields["text"] = " ".join(parsed.message.split())[:LINE_CHARS]
    who = _unnamed(who_fields) if unnamed else _who(named, owner, role, who_fields)
    return _Found(fields, who, role, named, owner, _innermost(frames))


def _pid_owner(
    owner: ParsedLine | None, context: Sequence[str], first: int, groups: dict[str, str]
) -> tuple[ParsedLine | None, bool]:
    """Whose line names the failed process by its pid (torchrun's, a shell's, the raylet's): that pid's own
    Ray process (its prefix before), else the printer unless nobody or Ray's own daemon printed it; True:
    nothing says whose process it was (the daemon's node still says where)."""
    if owner is not None and owner.actor not in RAY_DAEMONS:
        return owner, False
    found = pid_process(context, first, groups.get("pid"))
    if found is not None:
        return found, False
    if owner is not None and owner.ip:
        groups.setdefault("ip", owner.ip)
    return None, True


def _unnamed(said: dict[str, str | None]) -> str:
    """A process no line names but by its pid (or not at all)."""
    where = f" on {said['ip']}" if said["ip"] else ""
    return f"pid {said['pid']}{where}" if said["pid"] else f"a process the log does not name{where}"


def pid_process(lines: Sequence[str], index: int, pid: str | None) -> ParsedLine | None:
    """The Ray process with this pid, from its own prefix on a line before `lines[index]` (None: none)."""
    if not pid:
        return None
    needle = f" pid={pid}"
    for j in range(index - 1, max(-1, index - LOOKBACK), -1):
        if needle in lines[j]:
            parsed = parse_line(unquote(lines[j]))
            if parsed.pid is not None and str(parsed.pid) == pid and parsed.actor is not None:
                return parsed
    return None


def _who_fields(
    parsed: ParsedLine, owner: ParsedLine | None, groups: dict[str, str]
) -> dict[str, str | None]:
    """actor, pid, ip, tags and rank of the process that failed, in that order: what the line's pattern
    said, else the process that printed it (`owner`)."""
    own: dict[str, str | None] = (
        {"actor": owner.actor, "pid": str(owner.pid) if owner.pid is not None else None, "ip": owner.ip}
        if owner is not None
        else {}
    )
    return {
        "actor": groups.get("actor") or own.get("actor"),
        "pid": groups.get("pid") or own.get("pid"),
        "ip": groups.get("ip") or own.get("ip"),
        "tags": parsed.tags or (owner.tags if owner is not None else None),
        "rank": _rank_of(parsed, owner) or groups.get("rank"),
    }


def _who(named: bool, owner: ParsedLine | None, role: str | None, said: dict[str, str | None]) -> str:
    """The failing process as an operator reads it."""
    if named:
        return label(said["actor"], said["pid"], said["ip"])
    if owner is None and role not in (None, DRIVER):  # the frames said whose code broke
        return f"{role} code (its traceback names no process)"
    return line_label(owner)


def _role(actor: str | None, owner: ParsedLine | None, tags: str | None, frames: Sequence[str]) -> str | None:
    """The role of the process that failed: its actor class, else miles' process name; an engine's rank
    tags; else where the traceback broke (Megatron's forward is the train side's, whoever printed it)."""
    if actor:
        role = role_of(actor, owner.proc if owner else None)
    else:
        role = role_of(None, owner.proc) if owner else DRIVER
    if tags and role in (None, DRIVER):
        return ENGINE
    if role in (None, DRIVER):
        where = next((r for r in map(frame_role, frames) if r is not None), None)
        return where or role
    return role


def _merge(
    existing: FailureEvent,
    kind: FailureKind,
    found: _Found,
    parsed: ParsedLine,
    template: str | None,
    error: str | None,
) -> None:
    """A repeat of a known failure: counted; a sighting that names the actor that failed says more."""
    existing.count += parsed.repeat
    existing.max_repeat = max(existing.max_repeat, parsed.repeat)
    if found.named and not existing.named:
        existing.fields = {**existing.fields, **found.fields}
        existing.who, existing.role, existing.named = found.who, found.role, True
        existing.template, existing.line = template, " ".join(parsed.message.split())[:LINE_CHARS]
    elif _elastic_root(found.fields) and not _elastic_root(existing.fields):
        # torch elastic's root entry names the failure the table is about (an earlier row was another's)
        existing.fields = {**existing.fields, **found.fields}
        existing.template, existing.time = template, found.fields.get("failed_at") or existing.time
    else:  # a later sighting fills what the first left out (the rank of a WARN line's process, an owner's IP)
        if kind.elastic_block and template is not None and set(existing.fields) < set(found.fields):
            existing.template = template  # torch elastic's table after its agent's line: it says more
        existing.fields = {**found.fields, **existing.fields}
    _collect(kind, existing, found.fields)
    if error and not existing.error:
        existing.error = error[:LINE_CHARS]


def _elastic_root(fields: dict[str, str]) -> bool:
    return fields.get("elastic") == "root"


def _collect(kind: FailureKind, event: FailureEvent, fields: dict[str, str]) -> None:
    for name in kind.collect:
        value = fields.get(name)
        if value is not None and value not in event.collected.setdefault(name, []):
            event.collected[name].append(value)


# ---------------------------------------------------------------- helpers


def _lines_holding(
    text: str, starts: Sequence[int], numbers: LineNumbers
) -> Iterator[tuple[int, str, str | None]]:
    """(index in the chunk, line, the line after it or None) of each line holding one of `starts`, once."""
    end = -1
    for pos in starts:
        if pos < end:
            continue
        index = numbers.before(pos)
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        after_end = text.find("\n", end + 1)
        after = text[end + 1 : after_end if after_end >= 0 else len(text)] if end + 1 < len(text) else None
        yield index, text[start:end], after


def _split(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _stamp_of(time: str | None) -> float:
    return parse_ts(time.replace(",", ".")) if time and len(time) > 10 else float("nan")


def _stall_event(stall: Stall, template: str | None = None) -> FailureEvent:
    phase, line = stall.phase, stall.phase.line
    fields = {"phase": phase.name, "stood": _duration(stall.stood_s), "since": phase.stamp}
    for name, value in (("actor", line.actor), ("pid", line.pid), ("ip", line.ip)):
        if value is not None:
            fields[name] = str(value)
    return FailureEvent(
        kind=STALL,
        seq=phase.seq,
        fields=fields,
        role=role_of(line.actor, line.proc) if line.actor or line.proc else DRIVER,
        who=line_label(line),
        time=phase.stamp,
        line=" ".join(line.message.split())[:LINE_CHARS],
        template=template,
    )


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _progress_in(text: str, tails: list[int] | None = None) -> Iterator[tuple[int, re.Match[str]]]:
    """`step 6: {`-like heads in `text` with the `: {` each ends at (on the head's line: where its line
    number is asked, already counted), found from each `: {` (the scan's `tails`, else str.find), the
    pattern tried only on the line before it: a regex over the whole chunk without a literal to start from
    cost ~50 ms a MB."""
    for pos in tails if tails is not None else _tails(text):
        start = _progress_window(text, pos)
        m = _PROGRESS.search(text, start, pos) if start >= 0 else None
        if m is not None:
            yield pos, m


HEAD_REACH = len("] critic-rollout")  # the most a progress head spans before its number's space


def _progress_window(text: str, pos: int) -> int:
    """Where a progress head ending at `pos` can start: a match ends in ` <digits>`, so it starts at most
    HEAD_REACH before the line's last space (-1: no digits there, no match). The regex tried from the
    line's start walked a metric line's whole prefix first (measured 2x the window's cost)."""
    line = text.rfind("\n", 0, pos) + 1
    space = text.rfind(" ", line, pos)
    if space < 0 or not text[space + 1 : pos].isdecimal():
        return -1
    return max(line, space - HEAD_REACH)


def _tails(text: str) -> Iterator[int]:
    """Every `: {` in `text` (it cannot overlap itself: the scan's starts are the same)."""
    pos = text.find(PROGRESS_TAIL)
    while pos >= 0:
        yield pos
        pos = text.find(PROGRESS_TAIL, pos + len(PROGRESS_TAIL))


def _quoted(text: str) -> bool:
    """Whether a line of the chunk starts with markdown's quote marker. `">" in` first: one character is
    memchr (10 us a MB), where a search for `\\n>` stops at every line break (0.9 ms a MB)."""
    return ">" in text and (text.startswith(">") or "\n>" in text)


def _has(needle: str, flat: str, scan: Scan | None) -> bool:
    return scan.has(needle) if scan is not None else needle in flat


def _logical_lines(
    context: Sequence[str], base: int, by_line: dict[int, list[FailureKind | None]], wraps: Wraps
) -> dict[int, tuple[int, int, list[FailureKind | None]]]:
    """First physical line -> (its last, the chunk line that held a hint, the kinds): hints on two physical
    lines of one wrapped line are one line's kinds."""
    logical: dict[int, tuple[int, int, list[FailureKind | None]]] = {}
    for i in sorted(by_line):
        first, last = _logical_bounds(context, base + i, wraps)
        logical.setdefault(first, (last, i, []))[2].extend(by_line[i])
    return logical


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


def _source_line(lines: Sequence[str], index: int) -> bool:
    """A traceback's source line (under its `File "…", line N, in f`): code, never a message, even when it
    holds a hint (`raise RuntimeError(f"NCCL error: {e}")`)."""
    if index == 0 or _CODE.match(lines[index]) is None:
        return False
    before = "".join(unquote(lines[j]) for j in range(max(0, index - 2), index))  # a frame line wrapped once
    return FRAME.search(before) is not None


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


def traceback_frames(lines: Sequence[str], index: int, wraps: Wraps = NO_WRAPS) -> list[str]:
    """The frames (`file:line in func`) of the traceback that the exception line `lines[index]` ends,
    innermost first; or below it when the log was pasted newest-first."""
    for step in (-1, 1):
        frames = list(_frames(lines, index, step, wraps))
        if frames:
            return frames if step == -1 else frames[::-1]
    return []


def _frames(lines: Sequence[str], index: int, step: int, wraps: Wraps) -> Iterator[str]:
    j = index + step
    for _ in range(FRAME_LOOK):
        if not 0 <= j < len(lines):
            return
        line = unquote(lines[j])
        if j + 1 < len(lines) and wraps.continues(lines[j], lines[j + 1]):
            line += unquote(lines[j + 1])  # a frame line a terminal wrapped
        m = FRAME.search(line)
        if m is not None:
            yield f"{m['file']}:{m['lineno']} in {m['func']}"
        if "Traceback (most recent call last)" in line:
            return
        j += step


def _innermost(frames: Sequence[str]) -> str | None:
    """The innermost frame outside the machinery (runpy, Ray's worker, asyncio): where it broke."""
    return next((f for f in frames if not is_internal(f)), frames[0] if frames else None)


def innermost_frame(lines: Sequence[str], index: int, wraps: Wraps = NO_WRAPS) -> str | None:
    """The traceback's innermost frame that is not machinery, above the exception line (or below it)."""
    return _innermost(traceback_frames(lines, index, wraps))


def _process_of(line: str) -> tuple[str | None, int | None]:
    """The Ray process that printed a physical line (None, None: no prefix, the driver or a continuation)."""
    parsed = parse_line(unquote(line))
    return parsed.actor, parsed.pid


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


def _group_fields(message: str, groups: dict[str, str]) -> None:
    """The process group a c10 line names, and the rank inside it (never taken for the global rank)."""
    m = _GROUP.search(message)
    if m is not None:
        groups.setdefault("group", m["desc"] or m["guid"] or f"PG {m['pg']}")
        groups.setdefault("group_rank", m["rank"])
        return
    g = _GROUP_RANK.search(message)
    if g is not None:
        groups.setdefault("group_rank", g.group(1))


def _time_of(parsed: ParsedLine, line: str) -> str | None:
    if parsed.ts:
        return parsed.ts
    m = _STAMP.search(line)
    if m is not None:
        return m.group(0)
    g = _GLOG_STAMP.search(line)
    return g.group(1) if g else None
