"""Which lines to show: the filter (by actor, role, rank, node, pid, process name, level), the operator's
filter language that builds one, and the time index ("the line at time T").

The filter language is what an operator types in the logs view: `actor:NAME rank:3 node:IP pid:N proc:NAME
level:warning`, a bare word meaning an actor. An actor may be named by its role (`train`, `rollout`, `engine`:
every version's class names, from backend.signals.actors) or by any part of its class name. A rank filter
matches only lines whose bracket names a rank; older formats name none, so they never match a rank.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from backend.signals.actors import ROLES, role_of
from backend.signals.grammar import LEVEL_CODES, LEVEL_HINTS, LEVEL_NAMES, level_of
from backend.signals.store import CancelToken, LogLine, LogStore, Source

_FIELD_KEYS = ("actor", "rank", "node", "pid", "proc", "min_level")
_KEY_ALIASES = {"ip": "node", "level": "min_level"}
FILTER_HELP = "actor:NAME rank:N node:IP pid:N proc:NAME level:warning"


@dataclass(frozen=True)
class LineFilter:
    """Which lines to show; every given field must match (None = any)."""

    actor: str | None = None  # a role (train, rollout, engine, driver, helper) or part of a class name
    pid: int | None = None
    node: str | None = None  # an ip, or "head"
    rank: int | None = None
    proc: str | None = None
    min_level: str | None = None  # "warning" keeps warnings and errors

    def accepts(self, src: Source) -> bool:
        return (
            (self.actor is None or actor_matches(self.actor, src.actor, src.proc))
            and (self.pid is None or src.pid == self.pid)
            and (self.node is None or src.node == self.node)
            and (self.rank is None or src.rank == self.rank)
            and (self.proc is None or src.proc == self.proc)
        )

    @property
    def by_source(self) -> bool:
        """Whether it names processes at all (else only the level can drop a line)."""
        return self != LineFilter(min_level=self.min_level)

    @property
    def min_level_code(self) -> int:
        """The lowest level kept, as grammar's level code (0: every level)."""
        return LEVEL_CODES.get(self.min_level or "info", 0)

    def allowed_sources(self, store: LogStore, upto: int) -> set[int]:
        """The ids of the sources of the store's first `upto` lines it accepts."""
        return {s.id for s in store.sources(upto) if self.accepts(s)}


def actor_matches(wanted: str, actor: str | None, proc: str | None) -> bool:
    """`wanted` names a role (every version's names of it) or a part of the actor class, case-insensitive."""
    low = wanted.lower()
    if low in ROLES:
        return role_of(actor, proc) == low
    return actor is not None and low in actor.lower()


class FilterSyntaxError(ValueError):
    """What the operator typed is not a filter; the message says what would be."""


# what a filter key's value becomes on the LineFilter (a name: the text as typed)
_VALUE_OF: dict[str, Callable[[str], Any]] = {"rank": int, "pid": int, "min_level": str.lower}


def parse_filter(text: str) -> LineFilter:
    """Operator input `actor:X rank:3 node:IP pid:N proc:NAME level:warning` -> a LineFilter."""
    flt = LineFilter()
    for token in text.split():
        key, sep, value = token.partition(":")
        if not sep:
            key, value = "actor", token
        key = _KEY_ALIASES.get(key.lower(), key.lower())
        _check_filter_value(token, key, value)
        flt = replace(flt, **{key: _VALUE_OF.get(key, str)(value)})
    return flt


def _check_filter_value(token: str, key: str, value: str) -> None:
    """A known key with a value of its kind, else the error that says what would be one."""
    if key not in _FIELD_KEYS or not value:
        raise FilterSyntaxError(f"unknown filter {token!r}: use {FILTER_HELP}")
    if key in ("rank", "pid") and not value.isdigit():
        raise FilterSyntaxError(f"{key} must be a number, not {value!r}")
    if key == "min_level" and value.lower() not in LEVEL_NAMES:
        raise FilterSyntaxError(f"level must be one of {', '.join(LEVEL_NAMES)}, not {value!r}")


def level_lines(block: bytes, first: int) -> dict[int, int]:
    """Line index -> level code for the lines of `block` (starting at line `first`) that are not info."""
    starts: set[int] = set()
    for hint in LEVEL_HINTS:
        pos = block.find(hint)
        while pos >= 0:
            starts.add(block.rfind(b"\n", 0, pos) + 1)
            pos = block.find(hint, pos + 1)
    out: dict[int, int] = {}
    line, last = first, 0
    for start in sorted(starts):
        line += block.count(b"\n", last, start)
        last = start
        end = block.find(b"\n", start)
        code = level_of(block[start : end if end >= 0 else len(block)].decode("utf-8", errors="replace"))
        if code:
            out[line] = code
    return out


class FilteredLines:
    """The lines of a store one `LineFilter` accepts, as a sequence of absolute line indices."""

    def __init__(self, store: LogStore, flt: LineFilter) -> None:
        self.store, self.filter = store, flt
        self.indices = array("I")
        self._scanned = 0
        self._min_level = flt.min_level_code

    def refresh(self, cancel: CancelToken | None = None, block: int = 1 << 20) -> int:
        """Scan lines added since the last refresh; returns how many matched. Safe to call from a thread."""
        store, added = self.store, 0
        stop = len(store)
        while self._scanned < stop:
            if cancel is not None and cancel.cancelled:
                break
            step = block if not self._min_level else min(block, 1 << 16)
            a, b = self._scanned, min(stop, self._scanned + step)
            candidates: Iterator[int] = iter(range(a, b))
            if self.filter.by_source:
                ids = store.source_ids(a, b)
                allowed = self.filter.allowed_sources(store, b)
                candidates = itertools.compress(range(a, b), map(allowed.__contains__, ids))
            if self._min_level:
                levels, lvl = level_lines(store.spool_bytes(a, b), a), self._min_level
                candidates = (i for i in candidates if levels.get(i, 0) >= lvl)
            before = len(self.indices)
            self.indices.extend(candidates)
            added += len(self.indices) - before
            self._scanned = b
        return added

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> int:
        return self.indices[k]

    def line(self, k: int) -> LogLine:
        return self.store.line(self.indices[k])


# ---------------------------------------------------------------- the time index


class TimeSyntaxError(ValueError):
    """What the operator typed is not a time."""


def parse_time(text: str, first_ts: str | None) -> str:
    """`HH:MM[:SS]` (on the day of the log's first timestamp) or `YYYY-MM-DD HH:MM[:SS]` -> the sortable
    timestamp form `YYYY-MM-DD HH:MM:SS` lines are compared in."""
    text = " ".join(text.split())
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            pass
    for fmt in ("%H:%M:%S", "%H:%M"):
        try:
            t = datetime.strptime(text, fmt)
        except ValueError:
            continue
        day = (first_ts or datetime.now().strftime("%Y-%m-%d"))[:10]
        return f"{day} {t.strftime('%H:%M:%S')}"
    raise TimeSyntaxError(f"not a time: {text!r} (use HH:MM, HH:MM:SS or YYYY-MM-DD HH:MM)")


def _sortable(ts: str) -> str:
    return ts[:19].replace("T", " ")


def ts_near(line_at: Callable[[int], LogLine], count: int, pos: int, *, forward: bool = False) -> str | None:
    """The timestamp of line `pos`, else of the nearest stamped line before it (after it if `forward`):
    tracebacks and SGLang noise carry none and lean on their neighbours."""
    span = range(pos, min(count, pos + 200)) if forward else range(pos, max(-1, pos - 50), -1)
    for p in span:
        ts = line_at(p).ts
        if ts:
            return _sortable(ts)
    return None


def line_at_time(line_at: Callable[[int], LogLine], count: int, text: str) -> int:
    """The position of the first line at or after the time the operator typed (lines are in arrival order,
    which follows the clock closely enough to bisect). `line_at(pos)` reads line `pos` of the view (all
    lines, or those a filter kept). Raises TimeSyntaxError for what is not a time."""
    if count <= 0:
        return 0
    target = parse_time(text, ts_near(line_at, count, 0, forward=True))
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        ts = ts_near(line_at, count, mid)
        if ts is None or ts < target:
            lo = mid + 1
        else:
            hi = mid
    return min(lo, count - 1)
