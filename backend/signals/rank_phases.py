"""Where each rank spends its time: per-rank phase spans, each rank's current phase, and rounds of a phase
across ranks (what a straggler is measured against).

Sources: miles' dashboard `phases/` stream (an open marker, t1 = -1, at once on a Timer's start; its close
later, in a batch: a close can arrive after the next open of the same name on the same rank, so a close is
matched to its open by t0 and never clears another open), else the log's `Timer <name> start` / `Timer
<name> end (elapsed: Ns)` lines whose bracket names a rank. Times stay on their source's clock: epoch
seconds for the dashboard, miles' clock for the log; `source` says which. Spans are kept for `keep_s`.

A round is one phase of one step on every rank: closes of the same name whose t0 lie within `ROUND_JOIN_S`
of the round's first. A round is final once a later round of that name got a close, or every lane that
ever ran the name is in it; final rounds queue in `rounds` (numbered) for the straggler check.
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from backend.natural_order import natural_key
from backend.signals.dump_reader import PhaseEvent
from backend.signals.grammar import BRACKETS, HEAD_NODE, parse_line, rank_of
from backend.signals.metrics import lines_containing, parse_ts

LaneKey = tuple[str, int, str]  # node, rank, role
ROUND_JOIN_S = 2.0
MAX_SPANS = 512  # per lane
MAX_ROUNDS = 256
TIMER_NEEDLE = "Timer "  # every line _TIMER matches holds it
_TIMER = re.compile(r"Timer (?P<name>[\w.-]+) (?:(?P<start>start)|end \(elapsed: (?P<elapsed>[\d.]+)\s*s\))")


# A Timer line is parsed by two readers of one chunk: the failure scanner's stall watch (its starts, first)
# and the phases here (every one); a parsed line is immutable, so the second asks the first's answer.
parse_timer_line = functools.lru_cache(maxsize=512)(parse_line)

# miles' Timer line whole, in one match: `(Actor pid=N[, ip=A]) [TS proc] file:N - Timer name start|end
# (elapsed: Xs)`, with no colour code or repeat suffix (`timer_line` checks). Its prefix is parse_line's
# shape of one, its bracket parse_line's "timestamp+process" (where SGLang's tag shape, tried first, matches
# too, the stamp is the same and neither has a rank), so a line it matches reads to the same stamp, node and
# rank; and `Timer ` cannot be in the head (no space in an actor, a proc, a file), so its Timer is the
# line's first, as _TIMER.search finds it. Any other line goes through both (tests compare).
_HEAD = (
    r"(?:\((?:[A-Za-z_][\w.]* )?pid=\d+(?:, ip=(?P<ip>[^()\s]+))?\) )?"
    + next(shape for shape in BRACKETS if shape.name == "timestamp+process").pattern.pattern
)
_TIMER_LINE = re.compile(_HEAD + r"[\w./-]+\.\w+:\d+ - " + _TIMER.pattern)
_TIMER_HEAD = re.compile(_HEAD)


class TimerLine(NamedTuple):
    """What the phases read of a Timer line: its phase, start or end, stamp, lane (a tuple: made for every
    Timer line, where a frozen dataclass's init cost a third of the line's read)."""

    name: str
    start: bool
    elapsed: str | None  # an end's seconds, as printed
    ts: str | None
    node: str
    rank: int | None


def timer_line(line: str) -> TimerLine | None:
    """A Timer line's fields (None: no Timer in it): by one match in miles' shape (12 us a line through
    parse_line, ~8k lines a million), else as _TIMER and parse_line read them."""
    if _plain(line):
        m = _TIMER_LINE.match(line)
        if m is not None:
            ip, proc = m["ip"], m["proc"]
            return TimerLine(
                m["name"], bool(m["start"]), m["elapsed"], m["ts"], ip or HEAD_NODE, rank_of(proc)
            )
    return _timer_line_parsed(line)


def _plain(line: str) -> bool:
    """No colour code and no repeat suffix: what parse_line would cut first is not there."""
    return "\x1b" not in line and "^[" not in line and " [repeated " not in line


def timer_stamp(line: str) -> str | None:
    """A Timer line's stamp, as parse_line reads it (the stall watch's: its own Timer match is looser)."""
    m = _TIMER_HEAD.match(line) if _plain(line) else None
    return m["ts"] if m is not None else parse_timer_line(line).ts


def _timer_line_parsed(line: str) -> TimerLine | None:
    m = _TIMER.search(line)
    if m is None:
        return None
    parsed = parse_timer_line(line)
    return TimerLine(m["name"], bool(m["start"]), m["elapsed"], parsed.ts, parsed.node, parsed.rank)


@dataclass(frozen=True)
class Span:
    name: str
    t0: float
    t1: float  # nan while open


@dataclass(frozen=True)
class LaneView:
    """One rank's recent spans (oldest first) and the phase it is in now (the newest open one)."""

    node: str
    rank: int
    role: str
    spans: tuple[Span, ...]
    current: str | None
    since: float  # nan when no phase is open

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank >= 0 else self.role


@dataclass(frozen=True)
class PhaseView:
    """Every lane, by node then rank, as of one moment; immutable, for the UI thread."""

    source: str  # "dashboard", "log" or "" (no phase seen)
    lanes: tuple[LaneView, ...]
    last_change: float  # newest t0/t1 seen: when any rank last changed phase (nan before any)
    offset: float = (
        0.0  # the source's clock minus the wall clock when the view was made ("now" = time() + offset)
    )


@dataclass(frozen=True)
class Round:
    """One phase across ranks: when each lane's close ended it."""

    seq: int
    name: str
    t0: float
    ends: tuple[tuple[LaneKey, float, float], ...]  # (lane, t0, t1)


@dataclass
class _Lane:
    spans: deque[Span] = field(default_factory=lambda: deque(maxlen=MAX_SPANS))
    open: dict[tuple[str, float], None] = field(default_factory=dict)


@dataclass
class _Pending:
    name: str
    t0: float
    ends: dict[LaneKey, tuple[float, float]] = field(default_factory=dict)


class RankPhases:
    """Per-rank phases, fed event by event; `view()` for the screen, `rounds` for the straggler check."""

    def __init__(self, keep_s: float = 1800.0) -> None:
        self.keep_s = keep_s
        self.source = ""
        self.lanes: dict[LaneKey, _Lane] = {}
        self.last_change = math.nan
        self.rounds: deque[Round] = deque(maxlen=MAX_ROUNDS)
        self._seq = 0
        self._pending: dict[str, list[_Pending]] = {}
        self._ran: dict[str, set[LaneKey]] = {}  # lanes that ever closed each phase name

    # ------------------------------------------------------------ inputs
    def add_event(self, event: PhaseEvent) -> None:
        """One record of the dashboard's `phases` stream."""
        key, t0, t1 = (event.node, event.rank, event.role), event.t0, event.t1
        if event.is_open:
            self.open(key, event.name, t0, "dashboard")
        elif math.isfinite(t0) and math.isfinite(t1) and t1 >= t0:
            self.close(key, event.name, t0, t1, "dashboard")

    def add_log_text(self, text: str) -> None:
        """The log's Timer lines that carry a rank; ignored once the dashboard stream speaks (it is per rank
        and exact, the log only rank 0's)."""
        if self.source == "dashboard" or TIMER_NEEDLE not in text:
            return
        for line in lines_containing(text, TIMER_NEEDLE):
            timer = timer_line(line)
            if timer is None or timer.rank is None or timer.ts is None:
                continue
            ts = parse_ts(timer.ts)
            key = (timer.node, timer.rank, "train")
            if timer.start:
                self.open(key, timer.name, ts, "log")
                continue
            lane = self.lanes.get(key)
            started = [t0 for name, t0 in (lane.open if lane else ()) if name == timer.name]
            self.close(
                key, timer.name, min(started) if started else ts - float(timer.elapsed or 0), ts, "log"
            )

    def open(self, key: LaneKey, name: str, t0: float, source: str) -> None:
        if not math.isfinite(t0):
            return
        self.source = self.source or source
        self.lanes.setdefault(key, _Lane()).open[(name, t0)] = None
        self._changed(t0)

    def close(self, key: LaneKey, name: str, t0: float, t1: float, source: str) -> None:
        self.source = self.source or source
        lane = self.lanes.setdefault(key, _Lane())
        lane.open.pop((name, t0), None)  # only its own open: a newer open of the same name stays
        lane.spans.append(Span(name, t0, t1))
        self._changed(t1)
        self._expire(lane, t1)
        self._round(key, name, t0, t1)

    def _changed(self, ts: float) -> None:
        if not ts <= self.last_change:
            self.last_change = ts

    def _expire(self, lane: _Lane, now: float) -> None:
        while lane.spans and lane.spans[0].t1 < now - self.keep_s:
            lane.spans.popleft()

    # ------------------------------------------------------------ rounds
    def _round(self, key: LaneKey, name: str, t0: float, t1: float) -> None:
        ran = self._ran.setdefault(name, set())  # lanes of the rounds already final
        pending = self._pending.setdefault(name, [])
        target = next((p for p in pending if abs(p.t0 - t0) <= ROUND_JOIN_S), None)
        if target is None:
            target = _Pending(name, t0)
            pending.append(target)
        target.ends[key] = (t0, t1)
        done = [p for p in pending if p.t0 < target.t0 - ROUND_JOIN_S or (ran and set(p.ends) >= ran)]
        for p in sorted(done, key=lambda p: p.t0):
            pending.remove(p)
            ran.update(p.ends)
            self._seq += 1
            self.rounds.append(
                Round(self._seq, p.name, p.t0, tuple((k, a, b) for k, (a, b) in p.ends.items()))
            )

    # ------------------------------------------------------------ output
    def current(self, key: LaneKey) -> tuple[str, float] | None:
        lane = self.lanes.get(key)
        if lane is None or not lane.open:
            return None
        name, t0 = max(lane.open, key=lambda o: o[1])
        return name, t0

    def view(self, offset: float = 0.0) -> PhaseView:
        lanes = []
        for key in sorted(self.lanes, key=lambda k: (natural_key(k[0]), k[1] < 0, k[1], k[2])):
            lane = self.lanes[key]
            opened = [Span(name, t0, math.nan) for name, t0 in lane.open]
            now = self.current(key)
            lanes.append(
                LaneView(
                    key[0],
                    key[1],
                    key[2],
                    tuple(sorted([*lane.spans, *opened], key=lambda s: s.t0)),
                    now[0] if now else None,
                    now[1] if now else math.nan,
                )
            )
        return PhaseView(
            self.source, tuple(lanes), self.last_change, offset if math.isfinite(offset) else 0.0
        )

    def longest_in_phase(self, now: float, count: int = 3) -> list[tuple[LaneKey, str, float]]:
        """The lanes that have been in their current phase longest: (lane, phase, seconds)."""
        found = [(key, cur[0], now - cur[1]) for key in self.lanes if (cur := self.current(key)) is not None]
        return sorted(found, key=lambda f: -f[2])[:count]


def lane_name(key: LaneKey) -> str:
    node, rank, role = key
    return f"rank {rank} on {node}" if rank >= 0 else f"{role} on {node}"


def rounds_after(phases: RankPhases, seq: int) -> Iterable[Round]:
    return (r for r in phases.rounds if r.seq > seq)
