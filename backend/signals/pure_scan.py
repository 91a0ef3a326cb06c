"""The pure-Python way to find many literals in a chunk (the scan engine without hyperscan): each needle
through its rarest character where the needles sharing it make that cheap, else through the cheapest of
its rarest pair of characters or a pass (shared with other needles through anchors,
backend.signals.anchors); every find checked with `startswith`.

How, measured (issue 33, one core, bench/bench_logs.py's logs): a find of one character is memchr (10 us
per MB); a pass of `str.find` 0.2-0.3 ms per MB for a piece of 6 characters or more and 0.45-0.6 below
(a regex alternation of all needles three times the sum of the passes); a regex of one literal 0.27 ms
and 2 ns more per occurrence of its first character (so it starts at the piece's rarest character), but
twice that on text of wider characters. A pair of ASCII characters is one character of a *view*, the
text's bytes read as UTF-16 (from offset 0 and from 1), where a find is memchr again, on the pair's first
character, its false stops skipped in C (10 ns) instead of checked from Python (0.1 us). Which characters
and pairs are rare is counted from a sample of the log (backend.signals.prefilter hands one now and then).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from backend.signals.anchors import anchors_of

# What a plan weighs, in ns per MB of text:
MEMCHR = 10_000  # a search of one character that finds nothing (a pair: the same in each view)
CHECK = 100  # each place a piece is found, and each needle checked there (a call from Python)
DISPATCH = 6  # needles sharing a character from which each find looks up the two characters around it
STOP = (20, 540_000)  # each occurrence of a pair's first character, both views; at most the second (the
# memchr then gives way to a plain loop over the view)
SHORT_FIND, FIND = 6, (450_000, 330_000)  # a pass of str.find: below SHORT_FIND characters, and from it
REGEX = (270_000, 2, 300)  # a regex of one literal: a pass, plus the second per occurrence of its first
# character, the third per find (a search from Python, then a check of the piece before it)
VIEWS = {True: 300_000, False: 1_300_000}  # making both views of an ASCII text, of a wider one

CHAR, PAIR, WHOLE, NEEDLE = "char", "pair", "whole", "needle"  # how a needle is searched: its piece's kind
# (NEEDLE: another needle it holds, checked where that one is found)

# A piece -> the needles found through it, each with the offsets of the piece in it.
Placed = dict[str, tuple[tuple[str, tuple[int, ...]], ...]]


@dataclass(frozen=True)
class Plan:
    """How to find a set of needles in text like the sample: through a character searched in the text
    (`by_char`), a pair searched in the views (`by_pair`), or an anchor found by passes (`by_anchor`; in
    ASCII text through a regex of it from the offset `regex` gives, where that is the faster). `_kept`:
    the last find's views, freed only once the next find's are made (freed first, the allocator handed
    their pages back and faulted fresh ones in for the next: 1.2 ms a MB, four times the views' cost)."""

    by_char: Placed
    by_pair: Placed = field(default_factory=dict)
    by_anchor: Placed = field(default_factory=dict)
    regex: dict[str, int] = field(default_factory=dict)
    by_needle: Placed = field(default_factory=dict)
    apart: Plan | None = None
    _kept: list[object] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def for_sample(cls, needles: Sequence[str], sample: str) -> Plan:
        unique = [n for n in dict.fromkeys(needles) if n]
        narrow = [n for n in unique if _narrow(n)]
        wide = [n for n in unique if not _narrow(n)]
        plan = _planned(narrow, _Counts.of(_stand_in(sample)))
        return replace(plan, apart=_planned(wide, _Counts.of(sample)) if wide else None)

    def find(self, text: str) -> dict[str, list[int]]:
        """Each needle found -> its starts, every occurrence (overlapping ones too), in order. A text of
        wider characters is searched as its ASCII stand-in (each wider character a '?', 0.8 ms a MB to
        make): the needles of ASCII without '?' are there where they are in the text, and every search
        is as fast as on ASCII text (a regex's twice as fast, memchr's and the views' too); the others
        (`apart`) are searched in the text itself."""
        found = self._found(text if text.isascii() else _stand_in(text))
        if self.apart is not None:
            found.update(self.apart._found(text))
        return found

    def _found(self, text: str) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for ch, placed in self.by_char.items():
            hits = _occurrences(text, ch)
            if len(placed) < DISPATCH:
                _verified(text, hits, placed, found, exact=ch)
            elif hits:
                _dispatched(text, hits, _around(ch, placed), found)
                if (ch, (0,)) in placed:  # the character is a needle too
                    found[ch] = hits
        for pair, hits in _pair_hits(text, self.by_pair, self._kept).items():
            _verified(text, hits, self.by_pair[pair], found, exact="")
        regex = self.regex if text.isascii() else {}  # a regex steps twice as slowly through wider text
        for anchor, placed in self.by_anchor.items():
            hits = _searched(text, anchor, regex[anchor]) if anchor in regex else _occurrences(text, anchor)
            _verified(text, hits, placed, found, exact=anchor)
        _through_found(text, self.by_needle, found)
        return found


def _through_found(text: str, by_needle: Placed, found: dict[str, list[int]]) -> None:
    """The needles checked where another they hold was found (that one found its own way)."""
    for inner, placed in by_needle.items():
        if inner in found:
            _verified(text, found[inner], placed, found, exact="")


def _planned(needles: list[str], counts: _Counts) -> Plan:
    """The cheaper plan: with pairs (and the views they need) or without (where that costs less than the
    views alone, as for a fresh monitor's empty sample, pairs are not weighed: choosing them takes ms)."""
    without = _choose(needles, counts, pairs=False)
    if without.cost <= VIEWS[counts.ascii]:
        return without.plan(counts)
    with_pairs = _choose(needles, counts, pairs=True)
    if with_pairs.uses(PAIR) and with_pairs.cost + VIEWS[counts.ascii] < without.cost:
        return with_pairs.plan(counts)
    return without.plan(counts)


def _narrow(needle: str) -> bool:
    """A needle found in a text's ASCII stand-in where it is in the text: ASCII, and no '?'."""
    return needle.isascii() and "?" not in needle


def _stand_in(text: str) -> str:
    """The text with each character past ASCII a '?' (the same length, the same offsets)."""
    return text if text.isascii() else text.encode("ascii", "replace").decode("ascii")


@dataclass(frozen=True)
class _Counts:
    """How often each character and each pair of characters occurs in a sample, per MB."""

    chars: Counter[str]
    pairs: Counter[str]
    per_mb: float
    sample: str

    @classmethod
    def of(cls, sample: str) -> _Counts:
        return cls(Counter(sample), _pair_counts(sample), 1_000_000 / max(1, len(sample)), sample)

    @property
    def ascii(self) -> bool:
        return self.sample.isascii()

    def char(self, ch: str) -> float:
        return self.chars[ch] * self.per_mb

    def pair(self, pair: str) -> float:
        return self.pairs[pair] * self.per_mb

    def rarest(self, piece: str) -> int:
        """The offset of the piece's rarest character (where a regex of it starts)."""
        return min(range(len(piece)), key=lambda i: (self.char(piece[i]), i))

    def by_regex(self, piece: str) -> float:
        """A regex pass from the piece's rarest character, on text like the sample (wider: twice)."""
        return (REGEX[0] + REGEX[1] * self.char(piece[self.rarest(piece)])) * (1 if self.ascii else 2)

    def regex_pays(self, piece: str) -> bool:
        """Whether a regex finds the piece faster than str.find, its finds counted (each dearer)."""
        finds = self.sample.count(piece) * self.per_mb
        return self.by_regex(piece) + finds * REGEX[2] < FIND[len(piece) >= SHORT_FIND] + finds * CHECK

    def by_pass(self, piece: str) -> float:
        return min(FIND[len(piece) >= SHORT_FIND], self.by_regex(piece))


@dataclass
class _Choice:
    """Each needle's way (its piece's kind, the piece) and the estimated cost of them all."""

    ways: dict[str, tuple[str, str]]
    cost: float

    def uses(self, kind: str) -> bool:
        return any(k == kind for k, _ in self.ways.values())

    def plan(self, counts: _Counts) -> Plan:
        groups: dict[str, dict[str, list[str]]] = {CHAR: {}, PAIR: {}, WHOLE: {}, NEEDLE: {}}
        for needle, (kind, piece) in self.ways.items():
            groups[kind].setdefault(piece, []).append(needle)
        anchors = anchors_of(tuple(groups[WHOLE]))
        by_anchor: dict[str, list[str]] = {a: [] for a in anchors}
        for needle in groups[WHOLE]:
            by_anchor[next(a for a in anchors if a in needle)].append(needle)
        regex = {a: counts.rarest(a) for a in anchors if counts.regex_pays(a)}
        return Plan(
            _placed(groups[CHAR]), _placed(groups[PAIR]), _placed(by_anchor), regex, _placed(groups[NEEDLE])
        )


def _choose(needles: list[str], counts: _Counts, *, pairs: bool) -> _Choice:
    """Each needle by its rarest character where the needles sharing it make that the cheapest, else by
    its best pair (where `pairs`) or a pass, whichever costs less."""
    rarest = {n: min(n, key=lambda c: (counts.char(c), c)) for n in needles}
    alone = {n: _alone(n, counts, pairs) for n in needles}
    ways: dict[str, tuple[str, str]] = {}
    cost = 0.0
    for ch, group in _grouped(rarest).items():
        stay, shared = _sharing(group, counts.char(ch), {n: alone[n][2] for n in group})
        ways.update((n, (CHAR, ch)) for n in stay)
        cost += shared
    for n in needles:
        if n not in ways:
            kind, piece, piece_cost = alone[n]
            ways[n] = (kind, piece)
            cost += piece_cost
    choice = _Choice({n: ways[n] for n in needles}, cost)
    _through_inner(choice, counts, alone)
    return choice


def _through_inner(choice: _Choice, counts: _Counts, alone: dict[str, tuple[str, str, float]]) -> None:
    """A needle holding another of the set (a catalog's 'RayActorError' holds its 'Error') is checked
    where that one is found, where its own pair or pass costs more than a check at each of those finds:
    found once, searched for free. The one held is searched its own way (never through a third)."""
    held = _held(choice.ways)
    dear = [n for n, (kind, _) in choice.ways.items() if kind in (PAIR, WHOLE) and n not in held]
    for needle in dear:
        best = min((m for m in held if m in needle), key=lambda m: (counts.sample.count(m), -len(m)))
        via = counts.sample.count(best) * counts.per_mb * CHECK
        if via < alone[needle][2]:
            choice.ways[needle] = (NEEDLE, best)
            choice.cost += via - alone[needle][2]


def _sharing(group: list[str], seen: float, alone: dict[str, float]) -> tuple[list[str], float]:
    """(the needles searched through their shared character, what that costs): those whose own way costs
    more than a check at each occurrence, where together they cost less than their own ways (from
    DISPATCH needles on, a find costs a lookup, as much as DISPATCH - 1 checks, whatever their number)."""
    stay = [n for n in group if alone[n] >= seen * CHECK]
    checks = min(len(stay), DISPATCH - 1)
    shared = MEMCHR + seen * CHECK * (1 + checks)
    if stay and shared <= sum(alone[n] for n in stay):
        return stay, shared
    return [], 0.0


def _alone(needle: str, counts: _Counts, pairs: bool) -> tuple[str, str, float]:
    """(kind, piece, cost) of a needle searched apart from the others: its best pair or a pass (a single
    character: itself)."""
    if len(needle) == 1:
        return CHAR, needle, MEMCHR + counts.char(needle) * CHECK
    best = (WHOLE, needle, counts.by_pass(needle))
    for i in range(len(needle) - 1 if pairs else 0):
        pair = needle[i : i + 2]
        if _pairable(pair):
            stops = min(counts.char(pair[0]) * STOP[0], STOP[1])
            cost = 2 * MEMCHR + stops + counts.pair(pair) * 2 * CHECK
            best = min(best, (PAIR, pair, cost), key=lambda b: b[2])
    return best


def _held(needles: Iterable[str]) -> list[str]:
    """The needles holding none of the others."""
    every = list(needles)
    return [n for n in every if not any(m != n and m in n for m in every)]


def _grouped(rarest: dict[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for needle, ch in rarest.items():
        groups.setdefault(ch, []).append(needle)
    return groups


def _placed(groups: dict[str, list[str]]) -> Placed:
    """Each piece's needles with the offsets of the piece in each (a needle may hold it more than once)."""
    return {
        piece: tuple((n, tuple(_occurrences(n, piece))) for n in needles) for piece, needles in groups.items()
    }


def _verified(
    text: str,
    hits: list[int],
    placed: Iterable[tuple[str, tuple[int, ...]]],
    found: dict[str, list[int]],
    *,
    exact: str,
) -> None:
    """Each needle's starts where its piece was found (`hits`, ascending) and the needle is; `exact`: the
    piece searched in the text itself, so a needle that is that piece needs no check."""
    for needle, offsets in placed:
        starts = hits if needle == exact else _checked(text, hits, needle, offsets)
        if starts:
            found[needle] = starts


def _checked(text: str, hits: list[int], needle: str, offsets: tuple[int, ...]) -> list[int]:
    """The needle's starts among the hits (a piece held twice finds a start twice: once kept)."""
    if len(offsets) == 1:
        off = offsets[0]
        return [p - off for p in hits if p >= off and text.startswith(needle, p - off)]
    return sorted({p - o for o in offsets for p in hits if p >= o and text.startswith(needle, p - o)})


_NONE: list[tuple[str, int]] = []
Around = tuple[dict[str, list[tuple[str, int]]], dict[str, list[tuple[str, int]]]]


@functools.lru_cache(maxsize=256)
def _around(ch: str, placed: tuple[tuple[str, tuple[int, ...]], ...]) -> Around:
    """The needles on a character by the two characters around each place of it: (the one before and it,
    for places past a needle's start; it and the one after, for places at the start). Hashed once per
    plan's group."""
    before: dict[str, list[tuple[str, int]]] = {}
    after: dict[str, list[tuple[str, int]]] = {}
    for needle, offsets in placed:
        for off in offsets if needle != ch else ():
            if off:
                before.setdefault(needle[off - 1 : off + 1], []).append((needle, off))
            else:
                after.setdefault(needle[:2], []).append((needle, off))
    return before, after


def _dispatched(text: str, hits: list[int], around: Around, found: dict[str, list[int]]) -> None:
    """Each needle's starts where the character was found: only the needles whose characters around it
    are the text's there are checked (a lookup a find instead of a check a needle)."""
    before, after = around
    starts: dict[str, set[int]] = {}
    for p in hits:
        for needle, off in before.get(text[p - 1 : p + 1], _NONE) + after.get(text[p : p + 2], _NONE):
            if p >= off and text.startswith(needle, p - off):
                starts.setdefault(needle, set()).add(p - off)
    found.update((needle, sorted(s)) for needle, s in starts.items())


def _pairable(pair: str) -> bool:
    """A pair the views can hold as one character: two ASCII characters, the first not NUL (a memchr for
    a zero byte would stop everywhere)."""
    return pair.isascii() and pair[0] != "\0"


def _unit(pair: str) -> str:
    """The view's character for a pair: its first character the low byte (UTF-16 little-endian)."""
    return chr(ord(pair[0]) | ord(pair[1]) << 8)


def _pair(unit: str) -> str:
    """The pair a view's character stands for (`_unit` undone)."""
    return chr(ord(unit) & 0xFF) + chr(ord(unit) >> 8)


def _pair_hits(text: str, pairs: Iterable[str], kept: list[object]) -> dict[str, list[int]]:
    """Each pair's starts in the text, ascending, found in the text's two views: its bytes read as UTF-16,
    from offset 0 and from offset 1, where unit k is the pair at 2k (+ 1). One byte a character: a wider
    one is '?' (found pairs are checked on the text itself, so a '?' that was not there is never
    reported); a pad byte evens an odd length (a pair with it never checks out). The buffers go to
    `kept` (Plan._kept says why)."""
    units = {pair: _unit(pair) for pair in pairs}
    if not units:
        return {}
    data = text.encode("ascii", "replace")
    if len(data) % 2:
        data += b" "
    even = data.decode("utf-16-le")
    hits = _view_hits(even, units, 0)
    sliced = data[1:-1]
    odd_view = sliced.decode("utf-16-le")
    odd = _view_hits(odd_view, units, 1)
    kept[:] = [data, even, sliced, odd_view]
    return {pair: sorted(found + odd[pair]) for pair, found in hits.items()}


def _view_hits(view: str, units: dict[str, str], parity: int) -> dict[str, list[int]]:
    """Each pair's starts found in one view (the pair at 2k + parity is its unit k)."""
    return {pair: [2 * k + parity for k in _occurrences(view, unit)] for pair, unit in units.items()}


def _pair_counts(sample: str) -> Counter[str]:
    """How often each pair of characters occurs in the sample (in its two views)."""
    data = sample.encode("ascii", "replace")
    units = Counter(data[: len(data) // 2 * 2].decode("utf-16-le"))
    units.update(data[1 : 1 + (len(data) - 1) // 2 * 2].decode("utf-16-le"))
    return Counter({_pair(unit): n for unit, n in units.items()})


@functools.lru_cache(maxsize=256)
def _pattern(piece: str) -> re.Pattern[str]:
    return re.compile(re.escape(piece))


def _searched(text: str, piece: str, rare: int) -> list[int]:
    """Every start of `piece`, overlapping ones too, through a regex of its tail from offset `rare` (its
    rarest character: sre steps through a literal's first character in C, at 0.27 ms per MB where that
    character is rare, faster than str.find's pass for a short piece; str.find measured 0.85 ms for a
    piece of two characters, its skip table having nothing to skip by)."""
    search = _pattern(piece[rare:]).search
    out = []
    m = search(text, rare)
    while m is not None:
        start = m.start() - rare
        if text.startswith(piece, start):
            out.append(start)
        m = search(text, m.start() + 1)
    return out


def _occurrences(text: str, needle: str) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones too."""
    out = []
    pos = text.find(needle)
    while pos >= 0:
        out.append(pos)
        pos = text.find(needle, pos + 1)
    return out
