"""The monitor's readers of the log, as a registry: each declares the needles (literals) its lines hold,
and one scan per chunk (backend.signals.prefilter, on the engine of backend.signals.scan_engine) finds
every reader's needles at once.

Why: a reader that searched the chunk itself cost a pass each, and a reader whose literal the prefilter
did not know never saw its lines (a silent miss). Here a reader is its needles: the scan is built from the
registry, a `LineReader` gets exactly the lines holding one of its needles and a `ChunkReader` the whole
chunk with the scan's positions; neither can be made without a needle (`needles` is a non-empty tuple for
mypy, and a TypeError at run time).

A new reader of the log goes here: a `LineReader(name, needles, read)` (or a `ChunkReader`) registered
in `RunMonitor._readers` (backend/signals/monitor.py).
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


class Readers:
    """The registry: what the scan looks for, and who gets what it found, in registration order."""

    def __init__(self, readers: Sequence[LineReader | ChunkReader] = ()) -> None:
        self.readers: list[LineReader | ChunkReader] = []
        for reader in readers:
            self.add(reader)

    def add(self, reader: LineReader | ChunkReader) -> None:
        if not isinstance(reader, LineReader | ChunkReader):
            raise TypeError(f"not a log reader: {reader!r}")
        self.readers.append(reader)

    def needles(self) -> Needles:
        """Every needle of every reader, each once (line needles, flat needles)."""
        lines = itertools.chain.from_iterable(r.needles for r in self.readers)
        flat = itertools.chain.from_iterable(r.flat for r in self.readers if isinstance(r, ChunkReader))
        return Needles(unique_needles(lines), unique_needles(flat))

    def feed(self, text: str, scan: Scan | None) -> None:
        """One chunk to every reader. Without a scan (the tests' unfiltered path) a line reader gets the
        whole chunk and looks for itself."""
        for reader in self.readers:
            if isinstance(reader, ChunkReader):
                reader.read(text, scan)
                continue
            lines = scan.lines_of(reader.needles) if scan is not None else text
            if lines:
                reader.read(lines)
