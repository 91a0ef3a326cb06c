"""Which lines of a chunk can matter to the monitor, found in one scan before any parsing.

Why: a week-long run's log is mostly noise (SGLang's decode lines, health checks); each reader of the log
(metrics, facts, rank phases, the shim ledger, alert rules, the failure catalog) used to search every chunk
for its own literals, some twenty passes per chunk. Here the literals of all of them are searched once:
each reader says what its lines hold (`needles`: the failure catalog's hints, the alert rules' hints, the
metric grammar's pieces, the Timer and shim markers, read from their data, so a new rule or kind is covered
by construction), the needles share a few anchors (backend.signals.failures.anchors), and a scan gives the
needles found and the lines holding them. Readers that look at single lines get only those lines; the
failure scanner, which needs a traceback's context, gets the whole chunk and the positions found.

The search runs on the chunk with its line breaks removed (as the failure scanner reads it), so a hint that
a terminal hard-wrapped in two is still found.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from backend.signals.alerts import Rule
from backend.signals.derived import FACT_NEEDLES
from backend.signals.failures.anchors import choose_anchors
from backend.signals.failures.catalog import FailureCatalog
from backend.signals.failures.scanner import RANK_CENSUS
from backend.signals.grammar import METRIC_NEEDLES
from backend.signals.rank_map import RANK_NEEDLE
from backend.signals.rank_phases import TIMER_NEEDLE
from shim.logline import LINE_PREFIX as SHIM_NEEDLE


@dataclass(frozen=True)
class Needles:
    """What the monitor's readers look for. `lines`: literals of single lines (metric lines, facts, Timer
    and rank lines, the shim's line, log rules' hints); their lines are handed on. `flat`: the failure
    catalog's hints (and what its scanner counts), searched with line breaks removed, their positions handed
    on with the whole chunk."""

    lines: tuple[str, ...]
    flat: tuple[str, ...]


def monitor_needles(rules: Iterable[Rule], catalog: FailureCatalog) -> Needles:
    """Every literal a line the monitor reads may hold, from the rules, the catalog and the grammars."""
    lines = (
        *METRIC_NEEDLES,
        *(hint for rule in rules for hint in rule.hints),
        SHIM_NEEDLE,
        TIMER_NEEDLE,
        RANK_NEEDLE,
        *FACT_NEEDLES,
    )
    flat = (*catalog.hints(), RANK_CENSUS)
    return Needles(_unique(lines), _unique(flat))


def _unique(needles: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for n in needles if n))


@dataclass
class Scan:
    """What one scan of a chunk found: the lines holding a line needle, and each flat needle's start
    positions in `flat` (the chunk without its line breaks), every occurrence, overlapping ones too."""

    text: str
    flat: str
    found: dict[str, list[int]]
    lines: str  # the lines holding any line needle, in order, each once, newline-terminated ("" if none)
    in_lines: frozenset[str]  # the line needles found

    def has(self, needle: str) -> bool:
        """Whether `needle` is in the chunk (a flat needle: maybe across a line break, as a wrap puts it)."""
        return needle in self.in_lines or needle in self.found

    def positions(self, needle: str) -> list[int]:
        """A flat needle's starts in `flat`, non-overlapping, in order (as repeated `str.find` gives them)."""
        kept: list[int] = []
        for start in self.found.get(needle, ()):
            if not kept or start >= kept[-1] + len(needle):
                kept.append(start)
        return kept


class Prefilter:
    """The needles of every reader, each searched once per chunk (flat ones through shared anchors)."""

    @classmethod
    @functools.lru_cache(maxsize=16)
    def of(cls, needles: Needles) -> Prefilter:
        """One prefilter per set of needles (choosing anchors takes a moment; every monitor of a process
        with the same rules and catalog shares it: a Prefilter holds no state between scans)."""
        return cls(needles)

    def __init__(self, needles: Needles) -> None:
        self.needles = needles
        self.anchors = choose_anchors(needles.flat)
        # anchor -> (needle, offset of the anchor in it) for every place the anchor occurs in a needle
        self._at: dict[str, list[tuple[str, int]]] = {a: [] for a in self.anchors}
        for needle in needles.flat:
            anchor = next(a for a in self.anchors if a in needle)
            self._at[anchor].extend((needle, off) for off in _occurrences(needle, anchor))

    def scan(self, text: str) -> Scan:
        ends: dict[int, int] = {}  # line start -> its end, for every line holding a line needle
        in_lines = set()
        for needle in self.needles.lines:
            pos = text.find(needle)
            if pos >= 0:
                in_lines.add(needle)
            while pos >= 0:
                start = text.rfind("\n", 0, pos) + 1
                end = text.find("\n", pos)
                end = len(text) if end < 0 else end
                ends[start] = end
                pos = text.find(needle, end)
        lines = "".join(text[a : ends[a]] + "\n" for a in sorted(ends))
        flat = text.replace("\n", "")
        found: dict[str, list[int]] = {}
        for anchor, placed in self._at.items():
            pos = flat.find(anchor)
            if pos < 0:
                continue
            for at in _occurrences(flat, anchor, pos):
                for needle, off in placed:
                    start = at - off
                    if start >= 0 and flat.startswith(needle, start):
                        found.setdefault(needle, []).append(start)
        for needle, starts in found.items():
            if len(starts) > 1:
                found[needle] = sorted(set(starts))
        return Scan(text, flat, found, lines, frozenset(in_lines))


def _occurrences(text: str, needle: str, pos: int | None = None) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones too (from `pos`, a known first one)."""
    out = []
    pos = text.find(needle) if pos is None else pos
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + 1)
    return out
