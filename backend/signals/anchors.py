"""Find many literal hints in a chunk with few passes over it.

Why: one `str.find` pass per hint costs about the same whatever the hint, and the catalog has dozens. Each
hint holds one of a few anchors (substrings chosen from the hints themselves, greedily, so a new hint is
covered by construction); only the anchors are searched, and each hint is checked with `startswith` where
its anchor was found. The positions are exactly those `str.find` repeated after each hit would give.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

MIN_ANCHOR = 5  # shorter anchors match too often in ordinary text
MAX_ANCHOR = 16


def choose_anchors(hints: Iterable[str], given: Sequence[str] = ()) -> list[str]:
    """Substrings such that every hint contains one: `given` first, then greedily the substring shared by
    the most hints not yet covered (longer wins a tie). A hint shorter than MIN_ANCHOR is its own anchor."""
    chosen = list(given)
    left = [h for h in dict.fromkeys(hints) if h and not any(a in h for a in chosen)]
    while left:
        counts = _holders(left)
        best = max(counts, key=lambda sub: (counts[sub], len(sub)))
        chosen.append(best)
        left = [h for h in left if best not in h]
    return chosen


def _holders(left: list[str]) -> dict[str, int]:
    """How many hints hold each candidate: every piece of MIN..MAX_ANCHOR characters is counted once per
    hint holding it (a hint holds such a piece iff it is one of its own pieces); a short hint, a candidate
    of its own, is looked for in every hint."""
    counts: dict[str, int] = {}
    for hint in left:
        if len(hint) < MIN_ANCHOR:
            counts.setdefault(hint, sum(hint in h for h in left))
            continue
        for piece in _pieces(hint):
            counts[piece] = counts.get(piece, 0) + 1
    return counts


def _pieces(hint: str) -> dict[str, None]:
    """The hint's distinct substrings of MIN..MAX_ANCHOR characters, in first-seen order."""
    return dict.fromkeys(
        hint[i:j]
        for i in range(len(hint) - MIN_ANCHOR + 1)
        for j in range(i + MIN_ANCHOR, min(len(hint), i + MAX_ANCHOR) + 1)
    )


@functools.lru_cache(maxsize=64)
def anchors_of(hints: tuple[str, ...]) -> list[str]:
    """choose_anchors, once per set of hints (every monitor's failure scanner and prefilter plan asks again;
    choosing takes tens of ms). The list is shared: not to be changed."""
    return choose_anchors(hints)


class AnchoredHints:
    """The hints of a catalog, found through their anchors."""

    def __init__(self, hints: Iterable[str]) -> None:
        self.hints = list(dict.fromkeys(h for h in hints if h))
        self.anchors = anchors_of(tuple(self.hints))
        # anchor -> (hint, offset of the anchor in the hint) for every place the anchor occurs in a hint
        self._at: dict[str, list[tuple[str, int]]] = {a: [] for a in self.anchors}
        for hint in self.hints:
            anchor = next(a for a in self.anchors if a in hint)
            self._at[anchor].extend((hint, off) for off in _occurrences(hint, anchor, overlapping=True))

    def find_all(self, text: str) -> dict[str, list[int]]:
        """Each hint found in `text` -> its start positions, non-overlapping, in order (as repeated
        `text.find(hint, previous + len(hint))` gives them); hints not found are left out."""
        starts: dict[str, set[int]] = {}
        for anchor, placed in self._at.items():
            for pos in _occurrences(text, anchor, overlapping=True):
                for hint, off in placed:
                    start = pos - off
                    if start >= 0 and text.startswith(hint, start):
                        starts.setdefault(hint, set()).add(start)
        out: dict[str, list[int]] = {}
        for hint, found in starts.items():
            kept: list[int] = []
            for start in sorted(found):
                if not kept or start >= kept[-1] + len(hint):
                    kept.append(start)
            out[hint] = kept
        return out


def _occurrences(text: str, needle: str, *, overlapping: bool) -> list[int]:
    out = []
    step = 1 if overlapping else len(needle)
    pos = text.find(needle)
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + step)
    return out
