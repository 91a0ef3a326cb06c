"""One way in for a run's log text: lines (Ray's history stream or live tail, a saved file) become chunks of
complete lines, the chunks go into the run's LogStore, and the store's listener feeds the RunMonitor.

Why one path: the app, `metrics --job`, `logs` and the demo all read a Ray job's log; each used to batch
lines and wire store and monitor its own way. Here the batching (by count for history, by count or time for
a live tail, so a lone last line is not held back) and the wiring are written once. Nothing here talks to
Ray: callers pass the line iterator backend.cluster.dashboard gives them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.errors import ConsoleError
from backend.regular_files import open_regular
from backend.signals.monitor import RunMonitor
from backend.signals.store import LogStore

HISTORY_BATCH_LINES = 20_000  # lines per chunk while a run's history is rebuilt
LIVE_FLUSH_S = 0.1  # a live tail's lines wait at most this long for company
FILE_CHUNK = 1 << 20
THREAD_AT_LINES = 2000  # chunks this big are stored off the event loop


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Complete lines of a log, newline-terminated, and how many."""

    text: str
    lines: int


async def text_chunks(
    lines: AsyncIterable[str], *, max_lines: int = HISTORY_BATCH_LINES, flush_s: float | None = None
) -> AsyncIterator[LogChunk]:
    """Lines (without their newlines) in chunks of at most `max_lines`; with `flush_s`, a chunk is also
    cut once its first line has waited that long, even if no further line comes."""
    if flush_s is None:
        batch: list[str] = []
        async for line in lines:
            batch.append(line)
            if len(batch) >= max_lines:
                yield _chunk(batch)
                batch = []
        if batch:
            yield _chunk(batch)
        return
    async for chunk in _timed_chunks(lines, max_lines, flush_s):
        yield chunk


_END = object()


async def _timed_chunks(lines: AsyncIterable[str], max_lines: int, flush_s: float) -> AsyncIterator[LogChunk]:
    """A reader task fills a queue; this side cuts chunks by count or by age. The reader's error, if any,
    is raised here after the lines before it were yielded."""
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=4 * max_lines)
    failure: list[BaseException] = []

    async def read() -> None:
        try:
            async for line in lines:
                await queue.put(line)
        except Exception as err:  # handed to the consumer, which raises it in order
            failure.append(err)
        finally:
            await queue.put(_END)

    reader = asyncio.create_task(read())
    batch: list[str] = []
    started = 0.0
    try:
        while True:
            timeout = None if not batch else max(0.0, started + flush_s - time.monotonic())
            try:
                item = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                yield _chunk(batch)
                batch = []
                continue
            if item is _END:
                break
            if not batch:
                started = time.monotonic()
            batch.append(str(item))
            if len(batch) >= max_lines:
                yield _chunk(batch)
                batch = []
        if batch:
            yield _chunk(batch)
        if failure:
            raise failure[0]
    finally:
        reader.cancel()  # bounded: a follow that cannot close must never hang whoever stops reading
        await asyncio.wait({reader}, timeout=5.0)
        if reader.done() and not reader.cancelled():
            reader.exception()  # retrieved: its failure was already passed on above


def _chunk(batch: list[str]) -> LogChunk:
    return LogChunk("\n".join(batch) + "\n", len(batch))


def file_chunks(path: Path, size: int = FILE_CHUNK) -> Iterator[bytes]:
    """A saved log in pieces of `size` bytes (split anywhere: the store joins partial lines); a FIFO, device
    or socket is refused by its type before it is opened (it would block, or never end)."""
    if not path.exists():
        raise ConsoleError(f"no such log file: {path}")
    try:
        with open_regular(path, "log file") as fh:
            while piece := fh.read(size):
                yield piece
    except OSError as err:
        raise ConsoleError(f"cannot read {path}: {err.strerror}") from None


class RunLog:
    """One run's log on its way in: the store (scrollback) and the monitor (metrics, alerts) it feeds."""

    def __init__(self, store: LogStore, monitor: RunMonitor | None = None) -> None:
        self.store = store
        self.monitor = monitor
        self.lines_in = 0  # lines delivered so far (a live tail resumes after them)
        if monitor is not None:
            store.subscribe(monitor.on_log_lines)

    @classmethod
    def open(
        cls, spool_dir: str | os.PathLike[str], run_id: str, monitor: RunMonitor | None = None
    ) -> RunLog:
        return cls(LogStore(spool_dir, run_id=run_id), monitor)

    @classmethod
    @contextlib.contextmanager
    def scratch(cls, monitor: RunMonitor, run_id: str = "run") -> Iterator[RunLog]:
        """A run log in a spool that is deleted afterwards (the CLI reads a log once, for its metrics)."""
        try:
            spool_dir = tempfile.TemporaryDirectory(prefix="uc-log-", ignore_cleanup_errors=True)
        except OSError as err:  # a full or unwritable temp dir: one line, never an internal error
            raise ConsoleError(
                f"cannot create a scratch spool in {tempfile.gettempdir()}: {err.strerror}"
            ) from None
        with spool_dir as spool:
            run_log = cls.open(spool, run_id, monitor)
            try:
                yield run_log
            finally:
                run_log.close()

    def add(self, chunk: LogChunk | str | bytes) -> int:
        """Store a chunk (a LogChunk of complete lines, or raw text split anywhere); returns lines stored."""
        if isinstance(chunk, LogChunk):
            self.lines_in += chunk.lines
            chunk = chunk.text
        stored = self.store.append(chunk)
        self._say_unreadable()
        return stored

    async def add_async(self, chunk: LogChunk) -> int:
        """`add`, off the event loop for a big chunk (parsing a history batch takes tens of ms)."""
        if chunk.lines >= THREAD_AT_LINES:
            self.lines_in += chunk.lines
            stored = await asyncio.to_thread(self.store.append, chunk.text)
            self._say_unreadable()
            return stored
        return self.add(chunk)

    def add_file(self, path: Path) -> int:
        """A whole saved log, through the same sanitising path as a live run; returns its line count."""
        for piece in file_chunks(path):
            self.store.append(piece)
        self.store.flush()
        self._say_unreadable()
        self.lines_in = len(self.store)
        return self.lines_in

    def _say_unreadable(self) -> None:
        """The store's count of what it could not read as text, to the monitor (an alert, the JSON)."""
        if self.monitor is not None and self.store.unreadable:
            self.monitor.note_unreadable(self.store.unreadable)

    def close(self) -> None:
        self.store.close()
