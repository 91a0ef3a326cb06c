"""The engine that finds the monitor's needles in a chunk, behind one small interface.

Why two: hyperscan (the optional extra `ultra-console[fast]`) finds every literal of a set in one pass
over the bytes at memory speed, five times faster than the best pure-Python plan measured (issue 33);
without it the pure plan of backend.signals.pure_scan (each needle through its rarest character) runs.
Both return the same thing: each needle found -> every start, overlapping ones too, in order (character
offsets of the text); tests/unit/test_scan_engines.py runs both on every log fixture and compares.

Chosen once, at start: hyperscan where it imports, else pure; `ULTRA_CONSOLE_SCAN_ENGINE=pure|hyperscan`
forces one (a forced hyperscan that does not import is one line, never a traceback). `engine_name()` is
what `ultra-console --version` prints and what a `doctor` can ask.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from backend.errors import ConsoleError
from backend.signals.pure_scan import Plan

ENGINE_ENV = "ULTRA_CONSOLE_SCAN_ENGINE"
PURE = "pure"
HYPERSCAN = "hyperscan"


class Finder(Protocol):
    """Finds one set of needles in a text."""

    def find(self, text: str) -> dict[str, list[int]]:
        """Each needle found -> its starts (every occurrence, overlapping ones too), ascending."""
        ...


class Engine(Protocol):
    """Makes finders. `adapts`: its finders are planned from a sample of the log (the pure one), so the
    prefilter hands it one now and then; hyperscan's are not."""

    name: str
    adapts: bool

    def finder(self, needles: Sequence[str], sample: str) -> Finder: ...


class PureEngine:
    """backend.signals.pure_scan's Plan: str.find and memchr, planned from the log's own characters."""

    name = PURE
    adapts = True

    def finder(self, needles: Sequence[str], sample: str) -> Finder:
        return Plan.for_sample(needles, sample)


class _NoNeedles:
    def find(self, text: str) -> dict[str, list[int]]:
        return {}


# How a text is laid out for hyperscan, by its widest character: ASCII as is, else UTF-16 (every character
# two bytes: a match's byte offset halves to its character offset) or, with a character past U+FFFF,
# UTF-32. Encoding a str of two-byte characters to UTF-16 is nearly a copy; to UTF-8 it is a transcoding
# and the offsets then need a decode each (measured 3x the scan itself on tqdm-barred chunks).
_LAYOUTS = {1: "ascii", 2: "utf-16-le", 4: "utf-32-le"}


class HyperscanFinder:
    """Hyperscan databases of the literals, one per layout (compiled once per needle set, shared), each
    with its own scratch (a scan's working memory: one per finder, so monitors on two threads never share
    one). The needles of `once` are reported at their first start only (HS_FLAG_SINGLEMATCH): a reader
    that asks only whether one is there saves a Python callback per match (the train actors' needle is on
    a third of the lines)."""

    def __init__(self, hs: Any, needles: tuple[str, ...], once: frozenset[str] = frozenset()) -> None:
        self._hs = hs
        self._needles = needles
        self._flags = tuple(hs.HS_FLAG_SINGLEMATCH if n in once else 0 for n in needles)
        self._layouts: dict[int, tuple[Any, Any, list[int]]] = {}

    def _layout(self, width: int) -> tuple[Any, Any, list[int]]:
        """(database, scratch, each needle's length in bytes) of one layout, made when first needed."""
        made = self._layouts.get(width)
        if made is None:
            expressions = _expressions(self._needles, _LAYOUTS[width])
            db = _database(self._hs, expressions, self._flags)
            made = self._layouts[width] = (db, self._hs.Scratch(db), [len(e) for e in expressions])
        return made

    def find(self, text: str) -> dict[str, list[int]]:
        width, data = _laid_out(text)
        db, scratch, lengths = self._layout(width)
        starts: dict[int, list[int]] = {}

        def on_ascii(index: int, _start: int, end: int, _flags: int, _context: object) -> None:
            # a callback per match (a metric or rank line's needle): as little as can be
            try:
                starts[index].append(end - lengths[index])
            except KeyError:
                starts[index] = [end - lengths[index]]

        missed: set[int] = set()  # single-match needles whose one report was across two characters

        def on_wide(index: int, _start: int, end: int, _flags: int, _context: object) -> None:
            start = end - lengths[index]
            if not start % width:  # a wide layout can match across two characters' bytes: not a match
                starts.setdefault(index, []).append(start // width)
            elif self._flags[index]:
                missed.add(index)

        db.scan(data, match_event_handler=on_ascii if width == 1 else on_wide, scratch=scratch)
        for index in missed.difference(starts):  # its misaligned report was its only one: look again
            if (pos := text.find(self._needles[index])) >= 0:
                starts[index] = [pos]
        # one report per (needle, end): no duplicates; sorted in case hyperscan reports out of order (a
        # sorted list's sort is one C pass)
        return {self._needles[i]: sorted(found) for i, found in starts.items()}


def _laid_out(text: str) -> tuple[int, bytes]:
    if text.isascii():
        return 1, text.encode("ascii")
    data = text.encode("utf-16-le", "surrogatepass")
    if len(data) == 2 * len(text):
        return 2, data
    return 4, text.encode("utf-32-le", "surrogatepass")


def _expressions(needles: tuple[str, ...], encoding: str) -> tuple[bytes, ...]:
    """The needles in a layout; in the ASCII one as UTF-8: a needle with other characters then never
    matches (its bytes >= 0x80 are in no ASCII text), as it never could."""
    codec = "utf-8" if encoding == "ascii" else encoding
    return tuple(n.encode(codec, "surrogatepass") for n in needles)


@functools.lru_cache(maxsize=32)
def _database(hs: Any, expressions: tuple[bytes, ...], flags: tuple[int, ...]) -> Any:
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    n = len(expressions)
    patterns = [_escaped(e) for e in expressions]
    db.compile(expressions=patterns, ids=list(range(n)), elements=n, flags=list(flags))
    return db


def _escaped(literal: bytes) -> bytes:
    """A literal as a hyperscan pattern, every byte but a letter or digit as `\\xHH`: the binding passes
    patterns (its literal mode too) as C strings, so a NUL of a UTF-16 needle would end one."""
    return b"".join(bytes((b,)) if bytes((b,)).isalnum() else b"\\x%02x" % b for b in literal)


class HyperscanEngine:
    name = HYPERSCAN
    adapts = False

    def __init__(self, hs: Any) -> None:
        self._hs = hs

    def finder(self, needles: Sequence[str], sample: str, once: Sequence[str] = ()) -> Finder:
        """`once`: needles of `needles` whose first start alone is wanted (whether they are there)."""
        unique = tuple(dict.fromkeys(needles))
        return HyperscanFinder(self._hs, unique, frozenset(once)) if unique else _NoNeedles()


def finder_of(engine: Engine, needles: Sequence[str], once: Sequence[str], sample: str) -> Finder:
    """A finder of `needles` and `once`, the starts of `once` wanted only to know they are there: hyperscan
    reports their first start alone; another engine finds every start (the same presence)."""
    if isinstance(engine, HyperscanEngine):
        return engine.finder((*needles, *once), sample, once)
    return _FirstOf(engine.finder(needles, sample), tuple(n for n in once if n not in needles))


class _FirstOf:
    """Another engine's finder of `needles`, and the first start of each of `once` by `str.find`, which
    stops there: a needle on every third line is found in its first hundred bytes, where a plan would list
    its two thousand starts a MB from Python."""

    def __init__(self, finder: Finder, once: tuple[str, ...]) -> None:
        self._finder = finder
        self._once = once

    def find(self, text: str) -> dict[str, list[int]]:
        found = self._finder.find(text)
        for needle in self._once:
            first = text.find(needle)
            if first >= 0:
                found[needle] = [first]
        return found


def _hyperscan() -> Any | None:
    try:
        import hyperscan  # type: ignore[import-untyped,unused-ignore]  # the optional extra `fast`
    except ImportError:
        return None
    return hyperscan


_MAKERS: dict[str, Callable[[], Engine | None]] = {
    PURE: PureEngine,
    HYPERSCAN: lambda: HyperscanEngine(hs) if (hs := _hyperscan()) is not None else None,
}


def make_engine(name: str) -> Engine:
    """The engine called `name`; a ConsoleError (one line) for an unknown one or hyperscan missing."""
    maker = _MAKERS.get(name)
    if maker is None:
        raise ConsoleError(f"{ENGINE_ENV}={name}: not an engine (one of: {', '.join(_MAKERS)})")
    engine = maker()
    if engine is None:
        raise ConsoleError(
            f"{ENGINE_ENV}={name}: hyperscan is not installed (pip install 'ultra-console[fast]')"
        )
    return engine


@functools.cache
def default_engine() -> Engine:
    """The engine of this process, chosen once: the environment's, else hyperscan where it imports."""
    forced = os.environ.get(ENGINE_ENV, "").strip().lower()
    if forced:
        return make_engine(forced)
    return HyperscanEngine(hs) if (hs := _hyperscan()) is not None else PureEngine()


def engine_name() -> str:
    """`hyperscan` or `pure`: what `--version` says (and a `doctor` asks); an unusable forced one is said."""
    try:
        return default_engine().name
    except ConsoleError as err:
        return f"unusable ({err})"
