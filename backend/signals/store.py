"""The scrollback log store: every line of a run, sanitised, spooled to disk, reachable in O(1).

Why this shape: a GRPO run on 128 GPUs logs millions of lines, and the console must keep all of them for
scrollback and search without growing without bound. So the text lives in a spool file; memory holds only
integers per line (4 bytes of byte offset, and lazily a 2-byte source id: 100M lines cost 0.6 GB), and
lines are read back lazily with `pread` (the toolong way). Ingestion works on whole chunks with C-speed bytes
methods rather than per line, which is what lets it keep up with the log. One writer thread calls `append`;
any number of reader threads call `line`, `lines`, and the scans built on `spool_bytes` / `block_end` /
`source_ids`: backend.signals.filters (which lines a filter keeps) and backend.signals.search (which lines
match), both of which import this module and never the reverse.

A line's fields come from backend.signals.grammar when the line is read; Ray's repeat suffix is cut from
`LogLine.text` and kept as `LogLine.repeat` (the spool and the listeners' text keep it: it is how many
processes printed the line).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.errors import ConsoleError
from backend.safe_paths import PrivateDir, UnsafePath, safe_name
from backend.sanitize import DEFAULT_LINE_CAP
from backend.signals import grammar
from backend.signals.grammar import HEAD_NODE, LEVEL_NAMES, level_of
from backend.signals.line_front import CutLines, LineFront, UnreadableBytes

_FIRST = operator.itemgetter(0)
_INDEX_BLOCK = 4 << 20  # bytes of spool per step of the (lazy) source index
_MAX_SOURCES = 65535
_LEARN_CHUNKS = 4
# Offsets are kept in 32-bit words; the spool passes 4 GiB every ~30M lines, and the line where each further
# 4 GiB starts is listed (a handful of entries) so an offset is its word plus 4 GiB per wrap before it.
_WRAP = 1 << 32


class LogStoreError(ConsoleError):
    """The spool could not be created or read."""


class CancelToken:
    """Set it to stop a running scan of the spool (a search, a filter) at its next block."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True, slots=True)
class Source:
    """One process that writes to the log, as Ray's prefix and miles' bracket name it."""

    id: int
    prefix: str  # text inside Ray's parentheses; "" for the driver's own lines
    actor: str | None
    pid: int | None
    ip: str | None
    proc: str | None  # miles' bracket name (main, rollout_manager, actor_cell0_rank3, ...), once seen
    rank: int | None

    @property
    def node(self) -> str:
        return self.ip or HEAD_NODE


@dataclass(frozen=True, slots=True)
class LogLine:
    """A sanitised line and the fields parsed from it."""

    index: int
    text: str  # the whole line as it should be shown (Ray prefix kept, repeat suffix removed)
    message: str  # the text after Ray's prefix and miles' bracket
    actor: str | None
    pid: int | None
    ip: str | None
    node: str
    proc: str | None
    rank: int | None
    ts: str | None  # miles' timestamp, node-local wall clock, no zone
    file: str | None
    level: str
    repeat: int  # 1, or N from Ray's "[repeated Nx across cluster]"
    tags: str | None = None  # SGLang's rank tags (`DP0 TP0 EP3`)


def default_spool_dir() -> Path:
    from backend.settings import load_settings

    return load_settings().state_dir / "spool"


class _SourceIds(dict):
    """Ray prefix bytes (`(Actor pid=1, ip=x`, as cut at the first ") ") -> small source id.

    A miss registers a new source if the text really is a Ray prefix; anything else (a driver line, a
    line that merely contains ") ") is the driver's source 0 and is not remembered, so the dict stays small.
    """

    def __init__(self, store: LogStore) -> None:
        super().__init__()
        self._store = store

    def __missing__(self, key: bytes) -> int:
        m = grammar.PREFIX_KEY.fullmatch(key)
        if m is None:
            return 0
        sid = self._store._register_source(m.group(1).decode("utf-8", errors="replace"))
        self[key] = sid
        return sid


Listener = Callable[[int, int, str], None]


def _open_spool(directory: Path, name: str) -> int:
    """The spool `directory/name`, created empty, through safe_paths' rule (the directory this user's own
    and 0700, the file O_NOFOLLOW and regular): anything else is one LogStoreError line."""
    try:
        folder = PrivateDir(directory)
    except (OSError, UnsafePath) as err:
        raise LogStoreError(f"cannot create the log spool in {directory}: {_why(err)}") from None
    try:
        return folder.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    except (OSError, UnsafePath) as err:
        raise LogStoreError(f"cannot create the log spool {directory / name}: {_why(err)}") from None
    finally:
        folder.close()


def _why(err: Exception) -> str:
    return (err.strerror if isinstance(err, OSError) and err.strerror else str(err)).replace("\n", " ")


class LogStore:
    """Append-only, thread-safe (one writer, many readers) scrollback of one run's log."""

    def __init__(
        self,
        spool_dir: str | os.PathLike[str] | None = None,
        run_id: str = "run",
        *,
        line_cap: int = DEFAULT_LINE_CAP,
        cache_lines: int = 4096,
    ) -> None:
        directory = Path(spool_dir) if spool_dir is not None else default_spool_dir()
        self.path = directory / safe_name(run_id or "run", ".log")  # bounded; two ids never share a spool
        self._fd = _open_spool(directory, self.path.name)
        self.line_cap = line_cap
        self._front = LineFront(line_cap)
        # Line i starts at byte _cum[i] + i (+ 4 GiB per entry of _wraps <= i) of the spool: _cum counts line
        # bytes without their newlines, so one C-level accumulate over the line lengths builds it, modulo
        # 4 GiB; one extra entry marks the end. _total is the running count itself.
        self._cum = array("I", [0])
        self._wraps: list[int] = []
        self._total = 0
        # Source id per line, built lazily (first filter, `sources()`), not while ingesting: ingest stays at a
        # few C-level operations per line.
        self._src = array("H")
        self._src_lock = threading.Lock()
        self._n = 0  # lines published to readers (their bytes are in the spool)
        # Source 0: every line without a Ray prefix, i.e. the driver (miles names it `main`); a line's own
        # fields still come from its own bracket only.
        self._sources: list[Source] = [Source(0, "", None, None, None, "main", None)]
        self._source_ids = _SourceIds(self)
        self._unnamed: dict[int, int] = {}  # source -> chunks left to learn its bracket name from
        self._write_lock = threading.Lock()
        self._cache: OrderedDict[int, LogLine] = OrderedDict()
        self._cache_size = cache_lines
        self._cache_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False

    # ------------------------------------------------------------------ writing

    def append(self, chunk: bytes | str) -> int:
        """Add a piece of log, split anywhere (even inside a UTF-8 character). Complete lines are stored;
        a partial last line waits for its newline. Returns how many lines became readable.
        """
        with self._write_lock:
            cut = self._front.feed(chunk)
            return self._ingest(cut) if cut is not None else 0

    def flush(self) -> int:
        """Store the partial last line too (end of the log)."""
        with self._write_lock:
            cut = self._front.end()
            return self._ingest(cut) if cut is not None else 0

    def add_cut(self, cut: CutLines, unreadable: UnreadableBytes) -> int:
        """Store lines another front cut from this log's next bytes (backend.signals.front_process), with
        what it could not read of them; refused while this store's own front holds a partial line (the
        hand-over is at a line end)."""
        with self._write_lock:
            if self._front.holds:
                raise LogStoreError("a partial line is held: lines cut elsewhere would split it")
            if unreadable:
                self._front.unreadable = self._front.unreadable + unreadable
            return self._ingest(cut) if cut.lens else 0

    @property
    def unreadable(self) -> UnreadableBytes:
        """What of the log could not be read as text, so far."""
        return self._front.unreadable

    @property
    def front(self) -> LineFront:
        """The front cutting this log's lines (read for a hand-over; only the writer feeds it)."""
        return self._front

    def _ingest(self, cut: CutLines) -> int:
        """Store complete lines. Per line, only split, len and accumulate ran (the front); everything else
        works on the whole chunk at C speed."""
        clean, lens = cut.clean, cut.lens
        base, nlines = len(self._cum) - 1, len(lens)
        try:
            self._write(clean)
            self._index(lens)
        except Exception:
            del self._cum[base + 1 :]
            self._wraps = [w for w in self._wraps if w <= base]
            self._total = self._offset(base) - base
            raise
        self._n = base + nlines
        if self._listeners:
            text = clean.decode("utf-8")
            for listener in list(self._listeners):
                listener(base, nlines, text)
        return nlines

    def _index(self, lens: list[int]) -> None:
        """Extend the offsets by these line lengths: one C-level accumulate unless 4 GiB is crossed."""
        high = len(self._wraps) * _WRAP
        cum = list(itertools.accumulate(lens, initial=self._total - high))  # a list: fromlist beats extend
        end = cum[-1] + high
        del cum[0]
        if end - high < _WRAP:
            self._cum.fromlist(cum)
        else:  # once per 4 GiB of spool: per line in Python, one chunk
            first, shift = len(self._cum), 0
            low = array("I")
            for k, value in enumerate(cum):
                if value - shift >= _WRAP:
                    self._wraps.append(first + k)
                    shift += _WRAP
                low.append(value - shift)
            self._cum.extend(low)
        self._total = end

    def _write(self, data: bytes) -> None:
        """Write at the spool's end; a full disk or a failing device is one line (LogStoreError), never an
        OSError that ends a reader silently (the app would show "loading history" forever)."""
        view = memoryview(data)
        pos = self._offset(len(self._cum) - 1)
        try:
            while view:
                written = os.pwrite(self._fd, view, pos)
                view = view[written:]
                pos += written
        except OSError as err:
            raise LogStoreError(f"cannot write the log spool {self.path}: {err.strerror or err}") from None

    def _offset(self, i: int) -> int:
        """Byte offset of line i in the spool (i == len: the end)."""
        if self._wraps:
            return self._cum[i] + i + bisect.bisect_right(self._wraps, i) * _WRAP
        return self._cum[i] + i

    def _ensure_sources(self, stop: int) -> None:
        """Extend the per-line source index to line `stop` (reads the new lines back from the spool)."""
        with self._src_lock:
            a = len(self._src)
            while a < stop:
                b = self.block_end(a, stop, _INDEX_BLOCK)
                block = self.spool_bytes(a, b)
                lines = block.split(b"\n")
                lines.pop()
                self._src.extend(
                    map(
                        self._source_ids.__getitem__,
                        map(_FIRST, map(bytes.partition, lines, itertools.repeat(b") "))),
                    )
                )
                if self._unnamed:
                    self._learn_proc_names(block.decode("utf-8", errors="replace"))
                a = b

    def _register_source(self, prefix: str) -> int:
        sid = len(self._sources)
        if sid >= _MAX_SOURCES:
            return 0
        actor, pid, ip = grammar.parse_prefix_inner(prefix)
        self._sources.append(Source(sid, prefix, actor, pid, ip, None, None))
        self._unnamed[sid] = _LEARN_CHUNKS
        return sid

    def _learn_proc_names(self, text: str) -> None:
        """A process has one bracket name; learn it from its first bracketed line (rank filters use it)."""
        for sid, left in list(self._unnamed.items()):
            src = self._sources[sid]
            if left <= 1:
                del self._unnamed[sid]  # a process that never writes miles' bracket (SGLang, raylet)
            else:
                self._unnamed[sid] = left - 1
            head = f"({src.prefix}) ["
            pos = text.find(head)
            while pos > 0 and text[pos - 1] != "\n":
                pos = text.find(head, pos + 1)
            found = grammar.match_bracket(text, pos + len(head) - 1) if pos >= 0 else None
            proc = grammar.bracket_proc(found[0]) if found is not None else None
            if proc is not None:
                self._sources[sid] = Source(
                    sid, src.prefix, src.actor, src.pid, src.ip, proc, grammar.rank_of(proc)
                )
                self._unnamed.pop(sid, None)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._n

    @property
    def pending_text(self) -> str:
        """The partial last line (not yet terminated), sanitised; shown but not indexed."""
        return self._front.pending_text

    def sources(self, upto: int | None = None) -> list[Source]:
        """Every process seen in the first `upto` lines, or so far (indexes new lines first: call it off the
        UI thread on a big log)."""
        self._ensure_sources(self._n if upto is None else min(upto, self._n))
        return list(self._sources)

    def source_ids(self, start: int, stop: int) -> array:
        """The source id (`Source.id`) of each of lines [start, stop) (indexes them first if need be)."""
        stop = min(stop, self._n)
        self._ensure_sources(stop)
        return self._src[start:stop]

    def block_end(self, start: int, stop: int, block_bytes: int) -> int:
        """The first line after a block of about `block_bytes` of spool from line `start` (at least one line,
        at most `stop`): how scans step through the spool."""
        target = self._offset(start) + block_bytes
        b = bisect.bisect_right(_Offsets(self), target, start + 1, stop + 1) - 1
        return max(start + 1, min(b, stop))

    def spool_bytes(self, start: int, stop: int) -> bytes:
        """Lines [start, stop) as stored (sanitised UTF-8, each ending in a newline), with one `pread`."""
        first, end = self._offset(start), self._offset(stop)
        try:
            return os.pread(self._fd, end - first, first)
        except OSError as err:
            raise LogStoreError(f"cannot read the log spool {self.path}: {err.strerror}") from None

    def text(self, i: int) -> str:
        """Line i's sanitised text, without parsing fields."""
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self.spool_bytes(i, i + 1)[:-1].decode("utf-8", errors="replace")

    def line(self, i: int) -> LogLine:
        """Line i with its fields (cached: the viewport asks for the same lines again and again)."""
        if i < 0:
            i += self._n
        with self._cache_lock:
            hit = self._cache.get(i)
            if hit is not None:
                self._cache.move_to_end(i)
                return hit
        return self._remember(self._make_line(i, self.text(i)))

    def lines(self, start: int, stop: int) -> list[LogLine]:
        """Lines [start, stop) clipped to what exists, read with one `pread`."""
        n = self._n
        start, stop = max(0, start), min(stop, n)
        if start >= stop:
            return []
        texts = self.spool_bytes(start, stop).decode("utf-8", errors="replace").split("\n")
        return [
            self._remember(self._make_line(i, t)) for i, t in zip(range(start, stop), texts, strict=False)
        ]

    def _remember(self, line: LogLine) -> LogLine:
        with self._cache_lock:
            self._cache[line.index] = line
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return line

    def _make_line(self, i: int, text: str) -> LogLine:
        text, repeat = grammar.strip_repeat(text)
        parsed = grammar.parse_line(text)
        proc = parsed.proc
        if (
            proc is None and parsed.actor is not None
        ):  # the process's bracket name, learnt from its other lines
            inner = text[1 : text.find(") ")] if text.startswith("(") else ""
            sid = self._source_ids.get(("(" + inner).encode("utf-8"))
            proc = self._sources[sid].proc if sid is not None else None
        return LogLine(
            index=i,
            text=text,
            message=parsed.message,
            actor=parsed.actor,
            pid=parsed.pid,
            ip=parsed.ip,
            node=parsed.node,
            proc=proc,
            rank=grammar.rank_of(proc),
            ts=parsed.ts,
            file=parsed.file,
            level=LEVEL_NAMES[level_of(text)],
            repeat=repeat,
            tags=parsed.tags,
        )

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(first_index, count, sanitised_text)` from the writer's thread after each batch.

        Returns a function that unsubscribes. Keep listeners quick (post a message, bump a counter).
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def close(self) -> None:
        with self._write_lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Offsets:
    """A store's spool offsets as a sequence, for bisect."""

    def __init__(self, store: LogStore) -> None:
        self._offset = store._offset
        self._len = len(store._cum)

    def __getitem__(self, i: int) -> int:
        return self._offset(i)

    def __len__(self) -> int:
        return self._len
