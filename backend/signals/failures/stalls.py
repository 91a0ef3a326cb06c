"""A phase that stood still: miles' `Timer update_weights start` with no `end`, no progress line after
it, then an error (often only a driver traceback that says nothing of why). The stall is the cause: which
phase, since when, and how long it stood still (miles-log-formats.md §3b: progress means the run went on).

Cheap by design: only lines holding `Timer ` are parsed (miles prints a few per rollout), and the newest
timestamp of a chunk is read off its last 2 KB.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backend.signals.failures.owner import unquote
from backend.signals.grammar import STAMP, ParsedLine
from backend.signals.metrics import parse_ts
from backend.signals.rank_phases import parse_timer_line, timer_stamp

TIMER = re.compile(r"Timer (?P<name>\w+) (?P<what>start|end)\b")
TAIL_CHARS = 2048


@dataclass(frozen=True, slots=True)
class StallRule:
    """Which phases a stall is read in and how long one must stand still (configs/failures.toml [stall])."""

    phases: tuple[str, ...] = ()
    min_s: float = 300.0
    at_end: str | None = None  # the message of a stall the log simply ends in (None: the kind's own)


NO_STALLS = StallRule()


@dataclass(frozen=True, slots=True)
class OpenPhase:
    """A phase that started and has not ended: its name, the line that started it, and when."""

    name: str
    seq: int
    at: float  # its line's stamp (node-local, read as UTC)
    stamp: str
    text: str  # the line, parsed only for a stall's report (a phase a run sees thousands of times)

    @property
    def line(self) -> ParsedLine:
        return parse_timer_line(self.text)


@dataclass(frozen=True, slots=True)
class Stall:
    phase: OpenPhase
    stood_s: float
    at_end: bool = False  # no error after it: the log ends while it stands still


class PhaseWatch:
    """The open phases of the rule's names, and the newest timestamp the log has shown."""

    def __init__(self, rule: StallRule) -> None:
        self.rule = rule
        self.open: dict[str, OpenPhase] = {}
        self.latest = float("nan")  # the newest full timestamp seen
        self.reported: set[int] = set()  # phases (by their start line) already told as a stall

    def note_chunk(self, text: str) -> None:
        for m in STAMP.finditer(text, max(0, len(text) - TAIL_CHARS)):
            at = parse_ts(m.group(1).replace(",", "."))
            if at == at and not at < self.latest:  # not NaN, not older
                self.latest = at

    def note_lines(self, lines: Sequence[str], first_seq: int) -> None:
        """The chunk's lines (numbered from `first_seq`) that hold `Timer `, a wrapped tail joined on."""
        self.note_numbered(
            (
                (i, line, lines[i + 1] if i + 1 < len(lines) else None)
                for i, line in enumerate(lines)
                if "Timer " in line
            ),
            first_seq,
        )

    def note_numbered(self, timers: Iterable[tuple[int, str, str | None]], first_seq: int) -> None:
        """The chunk's `Timer ` lines as (index in the chunk, the line, the line after it or None)."""
        for i, line, after in timers:
            line = unquote(line)
            m = TIMER.search(line)
            if m is None and after is not None:  # a terminal wrapped the phase's name
                line += unquote(after)
                m = TIMER.search(line)
            if m is None or m["name"] not in self.rule.phases:
                continue
            if m["what"] == "end":
                self.open.pop(m["name"], None)
                continue
            ts = timer_stamp(line)
            at = parse_ts(ts) if ts else float("nan")
            if at == at:  # a start while open is a replayed tail (miles never starts a timer twice)
                self.open.setdefault(m["name"], OpenPhase(m["name"], first_seq + i, at, ts or "", line))

    def stalled(self, before_seq: int, at: float, progress: Sequence[tuple[int, str]]) -> Stall | None:
        """The open phase that started before `before_seq`, saw no progress line after it, and had stood still
        for at least the rule's time at `at` (else the newest stamp); None if none."""
        now = at if at == at else self.latest
        if now != now:
            return None
        for phase in sorted(self.open.values(), key=lambda p: p.seq):
            moved = _moved(phase.seq, before_seq, progress)
            stood = now - phase.at
            if (
                phase.seq < before_seq
                and not moved
                and stood >= self.rule.min_s
                and phase.seq not in self.reported
            ):
                return Stall(phase, stood)
        return None

    def stalled_at_end(self, end_seq: int, progress: Sequence[tuple[int, str]]) -> Stall | None:
        """The open phase the log ends in (no progress after its start, stood still the rule's time by the
        log's newest stamp); None if none."""
        stall = self.stalled(end_seq, float("nan"), progress)
        return None if stall is None else Stall(stall.phase, stall.stood_s, at_end=True)


def _moved(start: int, before: int, progress: Sequence[tuple[int, str]]) -> bool:
    """Progress between the phase's start and the error that had not been logged before the start (a job
    banner's replay of the tail repeats old step lines: they are not the run going on)."""
    earlier = {label for seq, label in progress if seq < start}
    return any(start < seq < before and label not in earlier for seq, label in progress)
