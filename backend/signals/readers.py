"""The monitor's readers of the log, as a registry: each declares the needles (literals) its lines hold,
and one scan per chunk (backend.signals.prefilter, on the engine of backend.signals.scan_engine) finds
every reader's needles at once.

Why: a reader that searched the chunk itself cost a pass each, and a reader whose literal the prefilter
did not know never saw its lines (a silent miss). Here a reader is its needles: the scan is built from the
registry, a `LineReader` gets exactly the lines holding one of its needles, a `ChunkReader` the whole
chunk with the scan's positions, a `TextReader` the whole chunk where one of its needles is; none can be
made without a needle (`needles` is a non-empty tuple for mypy, and a TypeError at run time).

A new reader of the log goes here: a `LineReader(name, needles, read)` (or a `ChunkReader`, a
`TextReader`) registered in `RunMonitor._readers` (backend/signals/monitor.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.signals.prefilter import Needles, Scan, unique_needles

if TYPE_CHECKING:
    from typing_extensions import Unpack

    NonEmpty = tuple[str, Unpack[tuple[str, ...]]]  # at least one needle: a reader of none is a type error


def _check(name: str, needles: tuple[str, ...]) -> None:
    if not needles or not all(isinstance(n, str) and n for n in needles):
        raise TypeError(f"log reader {name!r}: needs at least one needle, none empty (got {needles!r})")


@dataclass(frozen=True)
class LineReader:
    """Reads single lines: `read(lines)` gets a chunk's lines holding any of `needles`, in order, each
    once, newline-terminated (never called with none)."""

    name: str
    needles: NonEmpty
    read: Callable[[str], object]

    def __post_init__(self) -> None:
        _check(self.name, self.needles)


@dataclass(frozen=True)
class ChunkReader:
    """Reads the chunk whole (a traceback needs its context): `read(text, scan)` every chunk, with where
    the scan found its needles: `needles` in the text (`Scan.at`), `flat` in the text without its line
    breaks (`Scan.positions`, a hint a terminal wrapped in two still found). `scan` is None only on the
    unfiltered path the tests compare with."""

    name: str
    needles: tuple[str, ...]
    flat: tuple[str, ...]
    read: Callable[[str, Scan | None], None]

    def __post_init__(self) -> None:
        _check(self.name, (*self.needles, *self.flat))


@dataclass(frozen=True)
class TextReader:
    """Reads the whole chunk with one regex of its own (C speed), where one of `needles` is in it:
    `read(text)`. The scan learns only whether they are there (hyperscan reports a needle's first match
    alone): for a dense needle, a Python callback and a line cut per match cost more than the regex (a
    train actor's name is on a third of the lines)."""

    name: str
    needles: NonEmpty
    read: Callable[[str], object]

    def __post_init__(self) -> None:
        _check(self.name, self.needles)


Reader = LineReader | ChunkReader | TextReader


class Readers:
    """The registry: what the scan looks for, and who gets what it found, in registration order."""

    def __init__(self, readers: Sequence[Reader] = ()) -> None:
        self.readers: list[Reader] = []
        for reader in readers:
            self.add(reader)

    def add(self, reader: Reader) -> None:
        if not isinstance(reader, Reader):
            raise TypeError(f"not a log reader: {reader!r}")
        self.readers.append(reader)

    def needles(self) -> Needles:
        """Every needle of every reader, each once (line needles, flat needles, those asked only whether
        they are there)."""
        lines = itertools.chain.from_iterable(
            r.needles for r in self.readers if not isinstance(r, TextReader)
        )
        flat = itertools.chain.from_iterable(r.flat for r in self.readers if isinstance(r, ChunkReader))
        present = itertools.chain.from_iterable(r.needles for r in self.readers if isinstance(r, TextReader))
        return Needles(unique_needles(lines), unique_needles(flat), unique_needles(present))

    def feed(self, text: str, scan: Scan | None) -> None:
        """One chunk to every reader. Without a scan (the tests' unfiltered path) a line reader gets the
        whole chunk and looks for itself."""
        for reader in self.readers:
            if isinstance(reader, ChunkReader):
                reader.read(text, scan)
                continue
            if isinstance(reader, TextReader):
                if scan is None or any(map(scan.has, reader.needles)):
                    reader.read(text)
                continue
            lines = scan.lines_of(reader.needles) if scan is not None else text
            if lines:
                reader.read(lines)
