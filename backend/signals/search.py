"""Search over the spool: the indices of matching lines, a block of spool at a time, cancellable.

Reads the spool in blocks of about 1 MiB (small enough that the passes over a block run in the CPU cache,
big enough that the per-block Python work is noise) and matches over a whole block: bytes.count / find, a
few C passes that turn the block into a flag byte per line when hits are dense, or one compiled regex.
Python-level work per line happens only for hits of sparse searches.
"""

from __future__ import annotations

import itertools
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from backend.errors import ConsoleError
from backend.signals.filters import LineFilter
from backend.signals.grammar import level_of
from backend.signals.store import CancelToken, LogStore


class SearchPatternError(ConsoleError):
    """A search pattern is not a valid regular expression."""


@dataclass(frozen=True, slots=True)
class SearchBatch:
    """The hits of one block of spool, and how far the search has read (for a progress bar)."""

    hits: array  # line indices, ascending
    scanned: int  # lines [start, scanned) are searched
    stop: int  # the line the search ends at


def search_batches(
    store: LogStore,
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    start: int = 0,
    stop: int | None = None,
    flt: LineFilter | None = None,
    cancel: CancelToken | None = None,
    block_bytes: int = 1 << 20,
) -> Iterator[SearchBatch]:
    """Matching line indices of `store`, one batch per block of spool (empty ones too, so a caller can show
    progress); stops at the next block once `cancel` is set. Raises SearchPatternError for a bad regex."""
    if not pattern:
        return
    finder = make_finder(pattern, regex, ignore_case)
    stop = len(store) if stop is None else min(stop, len(store))
    a = max(0, start)
    while a < stop:
        if cancel is not None and cancel.cancelled:
            return
        b = store.block_end(a, stop, block_bytes)
        hits = finder(store.spool_bytes(a, b), a)
        if flt is not None and hits:
            hits = _filtered(hits, store, a, b, flt)
        yield SearchBatch(hits, b, stop)
        a = b


def _filtered(hits: array, store: LogStore, a: int, b: int, flt: LineFilter) -> array:
    """The hits among lines [a, b) that the filter keeps: by their source, then by their level."""
    if flt.by_source:
        allowed, ids = flt.allowed_sources(store, b), store.source_ids(a, b)
        hits = array("I", [i for i in hits if ids[i - a] in allowed])
    min_level = flt.min_level_code
    if min_level and hits:
        hits = array("I", [i for i in hits if level_of(store.text(i)) >= min_level])
    return hits


# The dense-hit pass (see `_dense_lines`): a hit becomes one NUL (sanitised spool text holds none), then
# everything but NULs and newlines is deleted, leaving per line as many NULs as it has hits.
_MARK = b"\x00"
_NOT_MARK_OR_NL = bytes(c for c in range(256) if c not in (0, 10))
_NL_TO_ZERO = bytes.maketrans(b"\n", b"\x00")


def _dense_lines(hay: bytes, needle: bytes, first: int) -> array:
    """Indices of the lines of `hay` holding `needle`, with no Python work per line or per hit.

    Four C passes over the block (replace, translate, two small ones over a byte per line) and one
    `compress` over a flag byte per line: when most lines hit, this beats splitting the block into
    line objects several times over.
    """
    flags = hay.replace(needle, _MARK + b" " * (len(needle) - 1)).translate(None, _NOT_MARK_OR_NL)
    while b"\x00\x00" in flags:  # a line with several hits counts once
        flags = flags.replace(b"\x00\x00", _MARK)
    flags = flags.replace(b"\x00\n", b"\x01").translate(_NL_TO_ZERO)  # one byte per line: 1 hit, 0 not
    return array("I", itertools.compress(itertools.count(first), flags))


def _sparse_lines(hay: bytes, needle: bytes, first: int) -> array:
    """Indices of the lines of `hay` holding `needle`, stepping hit by hit (few hits: cheaper than a pass)."""
    out = array("I")
    line, last, pos = first, 0, hay.find(needle)
    while pos >= 0:
        line += hay.count(b"\n", last, pos)
        out.append(line)
        last = hay.find(b"\n", pos)  # the next search starts on the next line: a line counts once
        pos = hay.find(needle, last)
    return out


def make_finder(pattern: str, regex: bool, ignore_case: bool) -> Callable[[bytes, int], array]:
    """A function (block of lines, index of its first line) -> array of the indices of matching lines."""
    if not regex and (not ignore_case or pattern.isascii()):
        needle = pattern.encode("utf-8")
        ignore_case = ignore_case and needle.lower() != needle.upper()  # no letters: no case to ignore
        needle = needle.lower() if ignore_case else needle

        def find_bytes(block: bytes, first: int) -> array:
            if b"\n" in needle:
                return array("I")  # no line holds a newline
            hay = block.lower() if ignore_case else block  # bytes.lower maps ASCII only, as the needle
            # Dense (about 1 hit per KiB and up) is where the passes of `_dense_lines` beat stepping hit by
            # hit; the first 64 KiB tell a dense block without a counting pass over all of it.
            sample = min(len(hay), 1 << 16)
            dense = hay.count(needle, 0, sample) > sample >> 10
            if not dense:
                hits = hay.count(needle)
                if not hits:
                    return array("I")
                dense = hits > len(hay) >> 10
            if dense and _MARK not in hay:
                return _dense_lines(hay, needle, first)
            return _sparse_lines(hay, needle, first)

        return find_bytes
    try:
        rx = re.compile(
            pattern if regex else re.escape(pattern), re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        )
    except re.error as err:
        raise SearchPatternError(f"bad search pattern {pattern!r}: {err}") from None

    def find_regex(block: bytes, first: int) -> array:
        text = block.decode("utf-8", errors="replace")
        out = array("I")
        line, last = first, 0
        m = rx.search(text)
        while m is not None:
            line += text.count("\n", last, m.start())
            out.append(line)
            end = text.find("\n", m.start())
            if end < 0:
                break
            m = rx.search(text, end + 1)
            line += 1
            last = end + 1
        return out

    return find_regex
