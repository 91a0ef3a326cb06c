"""Which lines of a chunk can matter to the monitor, found in one scan before any parsing.

Why: a week-long run's log is mostly noise (SGLang's decode lines, health checks); each reader of the log
(metrics, facts, rank phases, the rank map, alert rules, the failure catalog) used to search every chunk for
its own literals, some forty passes per chunk. Here the literals of all of them are searched once: each
reader's `needles` are read from its data (the failure catalog's hints, the alert rules' hints, the metric
grammar's pieces, the Timer, rank and shim markers), so a new rule or kind is covered by construction.
Readers of single lines get only the lines holding a line needle; the failure scanner, which needs a
traceback's context, gets the whole chunk and where its hints are, found in the chunk with its line breaks
removed (as it reads it), so a hint a terminal hard-wrapped in two is still found.

What is looked for is the reader registry's (backend.signals.readers); how, the scan engine's
(backend.signals.scan_engine: hyperscan, or the pure plan of backend.signals.pure_scan, which learns from
samples of the log this module hands it).
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from backend.signals.scan_engine import Engine, Finder, HyperscanEngine, default_engine, finder_of


@dataclass(frozen=True)
class Needles:
    """What the monitor's readers look for. `lines`: literals of single lines (metric lines, facts, Timer
    and rank lines, the shim's line, log rules' hints); their lines are handed on. `flat`: the failure
    catalog's hints (and what its scanner counts), searched with line breaks removed, their positions handed
    on with the whole chunk."""

    lines: tuple[str, ...]
    flat: tuple[str, ...]
    present: tuple[str, ...] = ()  # whose presence alone is asked (`Scan.has`): where, never

    @property
    def only_present(self) -> tuple[str, ...]:
        """The needles asked only for their presence, none that a line reader needs every start of."""
        return tuple(n for n in self.present if n not in self.lines)


def unique_needles(needles: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for n in needles if n))


@dataclass
class Scan:
    """What one scan of a chunk found: each line needle's starts in `text` (`at`), and each flat needle's
    starts in `flat` (the chunk without its line breaks; `found`), every occurrence, overlapping ones too.
    `flat_at`: where no flat needle can span a line break (hyperscan's scan says so), their starts in `text`,
    from which `found` is counted when asked (the copy without breaks is then never made)."""

    text: str
    at: dict[str, list[int]]  # line needle -> its starts in `text`
    searched: frozenset[str] = frozenset()  # the line needles looked for (found or not)
    present: frozenset[str] = frozenset()  # the needles asked only whether they are in the text, found
    flat_at: dict[str, list[int]] | None = None
    flat_found: dict[str, list[int]] | None = None  # their starts in `flat`, where the copy was searched
    _flat: str | None = None
    _lines: dict[tuple[str, ...], str] = field(default_factory=dict)
    _numbers: LineNumbers | None = None

    @property
    def flat(self) -> str:
        """The chunk without its line breaks (made when first asked)."""
        if self._flat is None:
            self._flat = self.text.replace("\n", "")
        return self._flat

    @property
    def found(self) -> dict[str, list[int]]:
        """Each flat needle found -> its starts in `flat`: a start in `text` less the breaks before it."""
        if self.flat_found is None:
            before = self.numbers.before
            self.flat_found = {n: [p - before(p) for p in at] for n, at in (self.flat_at or {}).items()}
        return self.flat_found

    @property
    def numbers(self) -> LineNumbers:
        """The chunk's line numbers, counted once for every reader that asks (backend.signals.failures'
        progress and Timer lines, the activity's line count)."""
        if self._numbers is None:
            self._numbers = LineNumbers(self.text)
        return self._numbers

    @property
    def lines(self) -> str:
        """The lines holding any line needle, in order, each once, newline-terminated ("" if none)."""
        return self.lines_of(tuple(self.at))

    def lines_of(self, needles: tuple[str, ...]) -> str:
        """The lines holding any of `needles` (line needles), in order, each once, newline-terminated: what
        a line reader of those needles gets (asked again, the same string)."""
        known = self._lines.get(needles)
        if known is None:
            starts = [self.at[n] for n in needles if n in self.at]
            known = _lines_at(self.text, sorted(itertools.chain.from_iterable(starts)) if starts else [])
            self._lines[needles] = known
        return known

    def starts(self, needle: str) -> list[int] | None:
        """A line needle's starts in `text` (every one, in order), or None when the scan did not look for it
        (the reader then searches itself)."""
        return self.at.get(needle, []) if needle in self.searched else None

    def has(self, needle: str) -> bool:
        """Whether `needle` is in the chunk (a flat needle: maybe across a line break, as a wrap puts it)."""
        flat = self.flat_at if self.flat_at is not None else self.found
        return needle in self.at or needle in flat or needle in self.present

    def positions(self, needle: str) -> list[int]:
        """A flat needle's starts in `flat`, non-overlapping, in order (as repeated `str.find` gives them)."""
        kept: list[int] = []
        for start in self.found.get(needle, ()):
            if not kept or start >= kept[-1] + len(needle):
                kept.append(start)
        return kept


class LineNumbers:
    """How many line breaks a text holds before a position, each stretch of it counted once however many
    readers ask: every answer is remembered, and a question is counted on from the nearest one before it
    (`str.count`, C speed). Three readers each counting a chunk's lines cost three passes over it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._at = [0]  # positions answered, ascending
        self._count = [0]  # line breaks before each
        self._total: int | None = None

    def before(self, pos: int) -> int:
        """`text.count("\\n", 0, pos)`, counted from the nearest answer before or after `pos` (a progress
        head's start is just before the `: {` its line was primed at)."""
        i = bisect.bisect_right(self._at, pos) - 1
        known = self._at[i]
        if known == pos:
            return self._count[i]
        if i + 1 < len(self._at) and self._at[i + 1] - pos < pos - known:
            count = self._count[i + 1] - self.text.count("\n", pos, self._at[i + 1])
        else:
            count = self._count[i] + self.text.count("\n", known, pos)
        self._at.insert(i + 1, pos)
        self._count.insert(i + 1, count)
        return count

    def prime(self, *runs: Iterable[int]) -> None:
        """Answer these positions in ascending order, each stretch counted once: readers asking in turn (the
        progress heads, then the Timer lines between them) counted each gap twice (measured: 2x the text)."""
        positions = sorted(itertools.chain(*runs))
        if len(self._at) > 1:  # answers already given: merged one by one
            for pos in positions:
                self.before(pos)
            return
        gaps = map(self.text.count, itertools.repeat("\n"), [0, *positions], positions)
        self._at, self._count = [0, *positions], [0, *itertools.accumulate(gaps)]

    @property
    def total(self) -> int:
        """`text.count("\\n")`."""
        if self._total is None:
            self._total = self.before(len(self.text))
        return self._total


SAMPLE_CHARS = 1 << 16  # of a chunk's head, counted to learn which characters are rare in this log
REPLAN_CHARS = 64 << 20  # text scanned between two countings (a log's mix changes: a run starts, trains)


def wrap_marks(needles: Iterable[str]) -> tuple[str, ...]:
    """What a text holds wherever one of `needles` is in it only once its line breaks are removed. Such an
    occurrence has a first break, after its first k characters (0 < k < len): the text holds them, then one
    break and the needle's next character, or two breaks. So a text with none of these marks holds each
    needle's flat occurrences whole, within a line: found in it, no copy without breaks needed. A needle
    holding a break is in no text without breaks: it has none (and is not looked for in the text)."""
    marks: dict[str, None] = {}
    for needle in needles:
        if "\n" not in needle:
            for k in range(1, len(needle)):
                marks[needle[:k] + "\n" + needle[k]] = marks[needle[:k] + "\n\n"] = None
    return tuple(marks)


class _FlatInText:
    """Hyperscan's way to the flat needles: looked for in the text itself with their wrap marks (one scan,
    thousands of literals at memory speed); only a chunk holding a mark is copied without its line breaks
    and searched again (the copy and its scan cost 0.1 s of the 0.2 s scan on a 150 MB log)."""

    def __init__(self, needles: Needles) -> None:
        flat = tuple(n for n in needles.flat if "\n" not in n)
        self.marks = frozenset(wrap_marks(flat))
        self.flat = frozenset(flat)
        self.every = unique_needles((*needles.lines, *flat))  # needles whose every start is wanted
        self.once = tuple(
            n for n in unique_needles((*needles.only_present, *self.marks)) if n not in self.every
        )
        self.not_lines = (self.flat | self.marks).difference(needles.lines)

    def split(self, at: dict[str, list[int]]) -> dict[str, list[int]] | None:
        """The flat needles' starts in the text (None where a mark says one may span a break), taken out of
        `at` with the marks (what stays: the line needles' and the present ones')."""
        flat_at = None if not self.marks.isdisjoint(at) else {n: at[n] for n in self.flat.intersection(at)}
        for needle in self.not_lines.intersection(at):
            del at[needle]
        return flat_at


MAX_SPANS = (
    16  # breaks a flat needle may span, checked one by one in a chunk (past it, and past one a KiB, the
)
# chunk is copied without its breaks and searched again: cheaper than checking them all)


class _Spans:
    """Where a flat needle may span a line break of a text, and its occurrences there. An occurrence that
    spans one has a first break, after its first k characters (0 < k < len, `wrap_marks`): the break has
    the needle's k-th character before it and its next one, or a further break, after it. So only the breaks
    whose two neighbours are such a pair are looked at: one regex pass over the breaks (in C, one test of
    the character after each), none of them in the sample log."""

    def __init__(self, flat: tuple[str, ...]) -> None:
        self.at: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (before, after) -> (needle, k)
        for needle in flat:
            for k in range(1, len(needle)):
                for after in (needle[k], "\n"):
                    self.at.setdefault((needle[k - 1], after), []).append((needle, k))
        self._before: dict[str, str] = {}  # a character after a break -> those before it that may span
        for before, after in self.at:
            self._before[after] = self._before.get(after, "") + before

    def pattern(self, order: str) -> re.Pattern[str] | None:
        """The regex of the breaks to check, its characters after them tried in `order` (the commonest
        first: each break costs a test per character tried), or None where no needle can span one."""
        after = sorted(self._before, key=lambda c: (order.find(c) % (len(order) + 1), c))
        return _span_pattern(tuple((c, "".join(sorted(set(self._before[c])))) for c in after))

    def found(self, text: str, breaks: list[int], before: Callable[[int], int]) -> dict[str, list[int]]:
        """Each flat needle spanning one of these breaks -> its starts in the text without breaks."""
        out: dict[str, list[int]] = {}
        for b in breaks:
            for needle, k in self.at.get((text[b - 1], text[b + 1]), ()):
                start = b - k
                if (
                    start >= 0
                    and text.startswith(needle[:k], start)
                    and _unbroken(text, b + 1, len(needle) - k).startswith(needle[k:])
                ):
                    out.setdefault(needle, []).append(start - before(start))
        return {needle: sorted(starts) for needle, starts in out.items()}


@functools.lru_cache(maxsize=16)
def _span_pattern(after: tuple[tuple[str, str], ...]) -> re.Pattern[str] | None:
    """A break with one of `after`'s characters after it and one of its own before: each tried in turn,
    a character that is not it skipping the rest of its branch (nested, so a break costs one test per
    character tried, not one per character)."""
    if not after:
        return None
    tail = "(?!)"
    for ch, before in reversed(after):
        c = re.escape(ch)
        tail = f"(?:{c}(?<=[{re.escape(before)}]\n{c})|(?!{c}){tail})"
    return re.compile(f"\n(?={tail})")


def _unbroken(text: str, pos: int, count: int) -> str:
    """The first `count` characters of `text` from `pos` on, its breaks left out (fewer at its end)."""
    end = pos + count
    piece = text[pos:end].replace("\n", "")
    while len(piece) < count and end < len(text):
        more = count - len(piece)
        piece += text[end : end + more].replace("\n", "")
        end += more
    return piece


class _FlatInPlan:
    """The pure engine's way to the flat needles: one plan with the line needles, over the text itself
    (one pair of views a chunk, the characters and pairs shared; the copy without breaks and a plan of
    its own cost more than the line needles' scan), and the breaks they may span checked (`_Spans`)."""

    def __init__(self, needles: Needles) -> None:
        self.flat = tuple(n for n in unique_needles(needles.flat) if "\n" not in n)
        self.every = unique_needles((*needles.lines, *self.flat))
        self.once = tuple(n for n in needles.only_present if n not in self.every)
        self.spans = _Spans(self.flat)
        self.not_lines = frozenset(self.flat).difference(needles.lines)
        self.pattern = self.spans.pattern("")

    def learn(self, sample: str) -> None:
        """The characters after a sample's breaks, commonest first: what the break check tries first."""
        starts = collections.Counter(line[:1] for line in sample.split("\n")[1:])
        self.pattern = self.spans.pattern("".join(c for c, _ in starts.most_common()))

    def split(self, text: str, at: dict[str, list[int]]) -> tuple[dict[str, list[int]] | None, list[int]]:
        """The flat needles' starts in the text, taken out of `at` (what stays: the line needles' and the
        present ones'), and the breaks one may span (None in place of the starts where too many)."""
        flat_at = {n: at[n] for n in self.flat if n in at}
        for needle in self.not_lines.intersection(at):
            del at[needle]
        breaks: list[int] = []
        if self.pattern is not None:
            for m in self.pattern.finditer(text):
                breaks.append(m.start())
                if len(breaks) > MAX_SPANS and len(breaks) > len(text) >> 10:
                    return None, breaks
        return flat_at, breaks


class Prefilter:
    """The needles of every reader, each found once per chunk by the engine (backend.signals.scan_engine).
    The pure engine's way (by a rare character, or whole) is learnt from the log itself, now and then;
    what is found depends on neither."""

    def __init__(self, needles: Needles, engine: Engine | None = None) -> None:
        self.needles = needles
        self.engine = engine if engine is not None else default_engine()
        self._present = needles.only_present
        self._in_text = _FlatInText(needles) if isinstance(self.engine, HyperscanEngine) else None
        self._in_plan = _FlatInPlan(needles) if self._in_text is None else None
        self._finder: Finder = _NONE
        self._flat: Finder | None = None  # the flat needles' finder of the copy, made when first needed
        self._plan("")
        self._searched = frozenset(needles.lines)
        self._sampled = 0  # chars of the sample the plans were made from
        self._since = 0  # chars scanned since
        self._recent: list[str] = []  # small chunks since, pooled into a sample (a live tail's)

    def _plan(self, sample: str) -> None:
        self._sample = sample
        if self._in_text is not None:
            self._finder = finder_of(self.engine, self._in_text.every, self._in_text.once, sample)
            self._flat = self.engine.finder(self.needles.flat, sample)
        elif self._in_plan is not None:
            self._finder = finder_of(self.engine, self._in_plan.every, self._in_plan.once, sample)
            self._in_plan.learn(sample)
            self._flat = None

    def _flat_finder(self) -> Finder:
        if self._flat is None:
            self._flat = self.engine.finder(self.needles.flat, self._sample)
        return self._flat

    def _learn(self, text: str) -> None:
        """Plan again from the log's recent text where the engine plans from samples (the pure one)."""
        self._since += len(text)
        if len(text) >= SAMPLE_CHARS:
            if self._sampled < SAMPLE_CHARS or self._since >= REPLAN_CHARS:
                self._plan(text[:SAMPLE_CHARS])
                self._sampled, self._since = SAMPLE_CHARS, 0
        elif self._sampled < SAMPLE_CHARS or self._since >= REPLAN_CHARS:
            self._recent.append(text)
            if self._since >= 2 * self._sampled:  # learn again from twice the text (at most a sample)
                sample = "".join(self._recent)[-SAMPLE_CHARS:]
                self._plan(sample)
                self._sampled, self._since = len(sample), 0
                self._recent = []
            elif len(self._recent) > 1 and self._since - len(self._recent[0]) >= SAMPLE_CHARS:
                del self._recent[0]  # the pool keeps no more than a sample's worth of text

    def scan(self, text: str) -> Scan:
        if self.engine.adapts:
            self._learn(text)
        at = self._finder.find(text)
        breaks: list[int] = []
        if self._in_text is not None:
            flat_at = self._in_text.split(at)
        elif self._in_plan is not None:
            flat_at, breaks = self._in_plan.split(text, at)
        present = frozenset(n for n in self._present if at.pop(n, None) is not None)
        scan = Scan(text, at, searched=self._searched, present=present, flat_at=flat_at)
        if flat_at is None:
            scan.flat_found = self._flat_finder().find(scan.flat) if self.needles.flat else {}
        elif breaks and self._in_plan is not None:
            _add_spanning(scan, self._in_plan.spans.found(text, breaks, scan.numbers.before))
        return scan


class _NoFinder:
    def find(self, text: str) -> dict[str, list[int]]:
        return {}


_NONE = _NoFinder()


def _add_spanning(scan: Scan, spanning: dict[str, list[int]]) -> None:
    """The flat needles' starts in the copy: those found in the text, and those spanning its breaks."""
    if spanning:
        found = scan.found
        for needle, starts in spanning.items():
            found[needle] = sorted(found.get(needle, []) + starts)
        scan.flat_at = None


def _lines_at(text: str, positions: list[int]) -> str:
    """The lines of `text` holding these (ascending) positions, each once, newline-terminated."""
    out: list[str] = []
    end = -1
    for pos in positions:
        if pos < end:
            continue
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        out.append(text[start:end])
    return "\n".join(out) + "\n" if out else ""
