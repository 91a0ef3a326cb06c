"""Which lines of a chunk can matter to the monitor, found in one scan before any parsing.

Why: a week-long run's log is mostly noise (SGLang's decode lines, health checks); each reader of the log
(metrics, facts, rank phases, the rank map, alert rules, the failure catalog) used to search every chunk for
its own literals, some forty passes per chunk. Here the literals of all of them are searched once: each
reader's `needles` are read from its data (the failure catalog's hints, the alert rules' hints, the metric
grammar's pieces, the Timer, rank and shim markers), so a new rule or kind is covered by construction.
Readers of single lines get only the lines holding a line needle; the failure scanner, which needs a
traceback's context, gets the whole chunk and where its hints are, found in the chunk with its line breaks
removed (as it reads it), so a hint a terminal hard-wrapped in two is still found.

How, measured: one `str.find` of a needle costs a pass over the chunk (0.2-0.8 ms per MB), a regex
alternation of all needles three times the sum of those passes, but a find of one character is memchr
(15 us per MB). So each needle is found through its rarest character where this log makes it rare (counted
from the log now and then), verified with `startswith`; the others through anchors they share.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backend.signals.anchors import anchors_of


@dataclass(frozen=True)
class Needles:
    """What the monitor's readers look for. `lines`: literals of single lines (metric lines, facts, Timer
    and rank lines, the shim's line, log rules' hints); their lines are handed on. `flat`: the failure
    catalog's hints (and what its scanner counts), searched with line breaks removed, their positions handed
    on with the whole chunk."""

    lines: tuple[str, ...]
    flat: tuple[str, ...]


def unique_needles(needles: Iterable[str]) -> tuple[str, ...]:
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


SAMPLE_CHARS = 1 << 16  # of a chunk's head, counted to learn which characters are rare in this log
REPLAN_CHARS = 64 << 20  # text scanned between two countings (a log's mix changes: a run starts, trains)
# One pass of a needle over a MB of text (str.find, 0.3-0.9 ms) costs about as much as this many steps of
# a search for one character (memchr) and checks of a needle where it occurs (0.15-0.3 us each, in Python).
CHECKS_PER_PASS = 3000


@dataclass(frozen=True)
class Plan:
    """How to find a set of needles in text like the sample: each needle by its rarest character, where
    that costs less than a pass of each needle on it (`by_char`), else by an anchor, a piece it shares with
    other such needles (`by_anchor`, backend.signals.anchors): both map what is searched to (needle, its
    offset)."""

    by_char: dict[str, list[tuple[str, int]]]
    by_anchor: dict[str, list[tuple[str, int]]]

    @classmethod
    def for_sample(cls, needles: Sequence[str], sample: str) -> Plan:
        per_mb = 1_000_000 / max(1, len(sample))
        seen = {ch: sample.count(ch) * per_mb for ch in set("".join(needles))}
        rarest = {needle: min(needle, key=lambda c: (seen[c], c)) for needle in needles}
        placed: dict[str, list[tuple[str, int]]] = {}
        for needle, ch in rarest.items():
            placed.setdefault(ch, []).extend(_placed(needle, ch))
        # a character's needles are found through it where its steps and checks cost less than their passes
        shared = Counter(rarest.values())
        cheap = {ch for ch, n in shared.items() if seen[ch] * (1 + len(placed[ch])) <= CHECKS_PER_PASS * n}
        by_char = {ch: found for ch, found in placed.items() if ch in cheap}
        common = [needle for needle in needles if rarest[needle] not in cheap]
        anchors = anchors_of(tuple(common))
        by_anchor: dict[str, list[tuple[str, int]]] = {a: [] for a in anchors}
        for needle in common:
            anchor = next(a for a in anchors if a in needle)
            by_anchor[anchor].extend(_placed(needle, anchor))
        return cls(by_char, by_anchor)

    def find(self, text: str) -> dict[str, list[int]]:
        """Each needle found -> its starts, every occurrence (overlapping ones too), in order."""
        found: dict[str, list[int]] = {}
        for piece, placed in itertools.chain(self.by_char.items(), self.by_anchor.items()):
            pos = _first(text, piece)  # one character: memchr, many times faster than a longer piece
            if pos < 0:
                continue
            if len(placed) == 1 and placed[0][0] == piece:  # the piece is the needle
                found[piece] = _occurrences(text, piece, pos)
                continue
            while pos >= 0:
                for needle, off in placed:
                    start = pos - off
                    if start >= 0 and text.startswith(needle, start):
                        found.setdefault(needle, []).append(start)
                pos = text.find(piece, pos + 1)
        for needle, starts in found.items():
            if len(starts) > 1:
                found[needle] = sorted(set(starts))
        return found


@functools.lru_cache(maxsize=64)
def _pair(piece: str) -> re.Pattern[str]:
    return re.compile(re.escape(piece))


def _first(text: str, piece: str) -> int:
    """`text.find(piece)`; a piece of two characters through a regex, which measured 0.55 ms per MB against
    str.find's 0.85 (its search steps through the first character; str.find's skip table has nothing to skip
    by for so short a needle). Longer pieces: str.find is the faster."""
    if len(piece) != 2:
        return text.find(piece)
    m = _pair(piece).search(text)
    return m.start() if m is not None else -1


def _placed(needle: str, piece: str) -> list[tuple[str, int]]:
    """(needle, offset) for every place `piece` occurs in `needle`."""
    return [(needle, off) for off in _occurrences(needle, piece)]


class Prefilter:
    """The needles of every reader, each found once per chunk. How (by a rare character, or whole) is
    learnt from the log itself, now and then; what is found does not depend on it."""

    def __init__(self, needles: Needles) -> None:
        self.needles = needles
        self._plans: tuple[Plan, Plan] = self._plan("")
        self._sampled = 0  # chars of the sample the plans were made from
        self._since = 0  # chars scanned since
        self._recent: list[str] = []  # small chunks since, pooled into a sample (a live tail's)

    def _plan(self, sample: str) -> tuple[Plan, Plan]:
        return Plan.for_sample(self.needles.lines, sample), Plan.for_sample(self.needles.flat, sample)

    def scan(self, text: str) -> Scan:
        self._since += len(text)
        if len(text) >= SAMPLE_CHARS:
            if self._sampled < SAMPLE_CHARS or self._since >= REPLAN_CHARS:
                self._plans, self._sampled, self._since = self._plan(text[:SAMPLE_CHARS]), SAMPLE_CHARS, 0
        elif self._sampled < SAMPLE_CHARS or self._since >= REPLAN_CHARS:
            self._recent.append(text)
            if self._since >= 2 * self._sampled:  # learn again from twice the text (at most a sample)
                sample = "".join(self._recent)[-SAMPLE_CHARS:]
                self._plans, self._sampled, self._since = self._plan(sample), len(sample), 0
                self._recent = []
            elif len(self._recent) > 1 and self._since - len(self._recent[0]) >= SAMPLE_CHARS:
                del self._recent[0]  # the pool keeps no more than a sample's worth of text
        in_text, in_flat = self._plans
        at = in_text.find(text)
        ends: dict[int, int] = {}  # line start -> its end, for every line holding a line needle
        end = -1
        for pos in sorted(itertools.chain.from_iterable(at.values())):
            if pos < end:
                continue
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            ends[start] = end
        lines = "".join(text[a : ends[a]] + "\n" for a in ends)
        flat = text.replace("\n", "")
        return Scan(text, flat, in_flat.find(flat), lines, frozenset(at))


def _occurrences(text: str, needle: str, pos: int | None = None) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones too (from `pos`, a known first one)."""
    out = []
    pos = text.find(needle) if pos is None else pos
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + 1)
    return out
