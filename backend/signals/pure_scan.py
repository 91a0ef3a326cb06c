"""The pure-Python way to find many literals in a chunk (the scan engine without hyperscan): each needle
through its rarest character where this log makes it rare, verified with `startswith`; the others through
anchors they share (backend.signals.anchors).

How, measured: one `str.find` of a needle costs a pass over the chunk (0.2-0.8 ms per MB), a regex
alternation of all needles three times the sum of those passes, but a find of one character is memchr
(15 us per MB). Which characters are rare is counted from a sample of the log (backend.signals.prefilter
hands one now and then).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from backend.signals.anchors import anchors_of

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


def _occurrences(text: str, needle: str, pos: int | None = None) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones too (from `pos`, a known first one)."""
    out = []
    pos = text.find(needle) if pos is None else pos
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + 1)
    return out
