"""The scrollback log store: every line of a run, sanitised, spooled to disk, reachable in O(1).

Why this shape: a GRPO run on 128 GPUs logs millions of lines, and the console must keep all of them for
scrollback and search without growing without bound. So the text lives in a spool file; memory holds only
integers per line (a byte offset, a 2-byte source id and a 1-byte level), and lines are read back lazily
with `pread` (the toolong way). Ingestion works on whole chunks with C-speed regexes rather than per line,
which is what lets it keep up with the log. One writer thread calls `append`; any number of reader threads
call `line`, `lines`, `search`, `filtered`.

Line fields come from Ray's prefix `(ActorName pid=123, ip=10.0.0.1)` (on the driver's own node Ray omits
the ip; we call that node "head") and miles' bracket `[2026-08-21 10:21:07.512 actor_cell0_rank0]`, parsed
when a line is read; Ray's ` [repeated Nx across cluster]` suffix is cut from `LogLine.text` and kept as
`LogLine.repeat` (the spool and the listeners' text keep it: it is how many processes printed the line).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.sanitize import DEFAULT_LINE_CAP, TRUNCATION_MARK, cap_line, clean_chunk, sanitize_text

HEAD_NODE = "head"  # the node of lines without an `ip=` (Ray leaves it out on the driver's node)

# A line's Ray prefix, as `bytes.partition(b") ")` cuts it: group 1 is the text inside the parentheses.
_PREFIX_KEY = re.compile(rb"\(((?:[^()\n]* )?pid=\d+(?:, ip=[^()\s]+)?|raylet(?:, ip=[^()\s]+)?)")
_FIRST = operator.itemgetter(0)
_INDEX_BLOCK = 4 << 20  # bytes of spool per step of the (lazy) source index
_PREFIX = re.compile(r"^\((?P<inner>[^()\n]*)\) ")
_INNER = re.compile(r"^(?:(?P<actor>.+?) )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>\S+))?$|^(?P<sys>raylet|autoscaler)(?:, ip=(?P<sip>\S+))?")
_BRACKET = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (?P<proc>[^\]\s]+)\] (?:(?P<file>[^:\s]+):(?P<lineno>\d+) - )?"
)
_BRACKET_AT = re.compile(_BRACKET.pattern[1:])  # the same, usable with match(text, pos)
_RANK = re.compile(r"_rank(\d+)$")
# Ray's dedup suffix. It stays in the spool (and in the text listeners get: it says how many processes
# printed the line) and is cut from `LogLine.text` on read, its count kept in `LogLine.repeat`.
REPEATED = re.compile(r" \[repeated (\d+)x across cluster\](?: \(Ray deduplicates logs by default\.[^\n]*\))?$")
# Level is a heuristic: miles prints no level name, so look for the words that errors and warnings carry.
_LEVELS = re.compile(
    r"(?P<error>\b(?:ERROR|CRITICAL|FATAL)\b|Traceback \(most recent call last\)|\b\w*(?:Error|Exception): )"
    r"|(?P<warning>\b(?:WARNING|WARN)\b|\b\w*Warning: )"
)
LEVEL_NAMES = ("info", "warning", "error")
# Literal pieces of every _LEVELS match: found with bytes.find (fast) before the regex confirms a line.
_LEVEL_HINTS = (b"ERROR", b"CRITICAL", b"FATAL", b"Traceback (most recent call last)", b"Error: ", b"Exception: ",
                b"WARN", b"Warning: ")
_LEVEL_CODES = {name: code for code, name in enumerate(LEVEL_NAMES)}
_MAX_SOURCES = 65535
_LEARN_CHUNKS = 4


class LogStoreError(ConsoleError):
    """The spool could not be created, read, or a search pattern is invalid."""


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


@dataclass(frozen=True)
class LineFilter:
    """Which lines to show; every given field must match (None = any)."""

    actor: str | None = None
    pid: int | None = None
    node: str | None = None  # an ip, or "head"
    rank: int | None = None
    proc: str | None = None
    min_level: str | None = None  # "warning" keeps warnings and errors

    def accepts(self, src: Source) -> bool:
        return (
            (self.actor is None or src.actor == self.actor)
            and (self.pid is None or src.pid == self.pid)
            and (self.node is None or src.node == self.node)
            and (self.rank is None or src.rank == self.rank)
            and (self.proc is None or src.proc == self.proc)
        )


class CancelToken:
    """Set it to stop a running search or filter scan at its next check."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


def default_spool_dir() -> Path:
    from backend.settings import load_settings

    return load_settings().state_dir / "spool"


def _parse_inner(inner: str) -> tuple[str | None, int | None, str | None]:
    m = _INNER.match(inner)
    if m is None:
        return inner or None, None, None
    if m["sys"]:
        return m["sys"], None, m["sip"]
    return m["actor"], int(m["pid"]), m["ip"]


def level_of(text: str) -> int:
    """0 info, 1 warning, 2 error: a heuristic, since miles prints no level name."""
    code = 0
    for m in _LEVELS.finditer(text):
        if m.lastgroup == "error":
            return 2
        code = 1
    return code


def _level_lines(block: bytes, first: int) -> dict[int, int]:
    """Line index -> level code for the lines of `block` (starting at line `first`) that are not info."""
    starts: set[int] = set()
    for hint in _LEVEL_HINTS:
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


def _cap_bytes(line: bytes, cap: int) -> bytes:
    return line if len(line) <= cap else cap_line(line.decode("utf-8", errors="replace"), cap).encode("utf-8")


class _SourceIds(dict):
    """Ray prefix bytes (`(Actor pid=1, ip=x`, as cut at the first ") ") -> small source id.

    A miss registers a new source if the text really is a Ray prefix; anything else (a driver line, a
    line that merely contains ") ") is the driver's source 0 and is not remembered, so the dict stays small.
    """

    def __init__(self, store: LogStore) -> None:
        super().__init__()
        self._store = store

    def __missing__(self, key: bytes) -> int:
        m = _PREFIX_KEY.fullmatch(key)
        if m is None:
            return 0
        sid = self._store._register_source(m.group(1).decode("utf-8", errors="replace"))
        self[key] = sid
        return sid


Listener = Callable[[int, int, str], None]


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
        safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "run"
        self.path = directory / f"{safe_id}.log"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as err:
            raise LogStoreError(f"cannot create the log spool {self.path}: {err.strerror}") from None
        self.line_cap = line_cap
        self._pending = b""
        self._pending_dropped = 0
        # Line i starts at byte _cum[i] + i of the spool (_cum counts line bytes without their newlines, so
        # one C-level accumulate over the line lengths builds it); one extra entry marks the end.
        self._cum = array("Q", [0])
        # Source id per line, built lazily (first filter, `sources()`), not while ingesting: ingest stays at a
        # few C-level operations per line.
        self._src = array("H")
        self._src_lock = threading.Lock()
        self._n = 0  # lines published to readers (their bytes are in the spool)
        self._sources: list[Source] = [Source(0, "", None, None, None, "main", None)]
        self._source_ids = _SourceIds(self)
        self._unnamed: dict[int, int] = {}  # source -> chunks left to learn its bracket name from
        self._write_lock = threading.Lock()
        self._cache: OrderedDict[int, LogLine] = OrderedDict()
        self._cache_size = cache_lines
        self._cache_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._new_lines = threading.Condition()
        self._closed = False

    # ------------------------------------------------------------------ writing

    def append(self, chunk: bytes | str) -> int:
        """Add a piece of log, split anywhere (even inside a UTF-8 character). Complete lines are stored;
        a partial last line waits for its newline. Returns how many lines became readable.
        """
        data = chunk.encode("utf-8", errors="replace") if isinstance(chunk, str) else bytes(chunk)
        if not data:
            return 0
        with self._write_lock:
            cut = data.rfind(b"\n")
            if cut < 0:
                self._hold(data)
                return 0
            head, tail = data[: cut + 1], data[cut + 1 :]
            if self._pending or self._pending_dropped:
                head = self._join_pending(head)
            self._pending = b""
            self._hold(tail)
            return self._ingest(head)

    def flush(self) -> int:
        """Store the partial last line too (end of the log)."""
        with self._write_lock:
            if not self._pending and not self._pending_dropped:
                return 0
            head = self._join_pending(b"\n")
            self._pending = b""
            return self._ingest(head)

    def _hold(self, data: bytes) -> None:
        """Keep a partial line, bounded: a progress bar keeps its last state, anything else its head."""
        if not data:
            return
        if self._pending_dropped:
            self._pending_dropped += len(data)
            return
        self._pending += data
        limit = 4 * self.line_cap
        if len(self._pending) > limit:
            last_cr = self._pending.rfind(b"\r", 0, len(self._pending) - 1)
            if last_cr >= 0 and len(self._pending) - last_cr - 1 <= limit:
                self._pending = self._pending[last_cr + 1 :]
            else:
                self._pending_dropped = len(self._pending) - self.line_cap
                self._pending = self._pending[: self.line_cap]

    def _join_pending(self, head: bytes) -> bytes:
        if self._pending_dropped:
            first_nl = head.find(b"\n")
            dropped = self._pending_dropped + first_nl
            self._pending_dropped = 0
            first = self._pending[: self.line_cap] + TRUNCATION_MARK.format(n=dropped).encode()
            return first + head[first_nl:]
        return self._pending + head

    def _ingest(self, data: bytes) -> int:
        """Store complete lines (`data` ends with a newline). Per line, only split, len and accumulate run;
        everything else works on the whole chunk at C speed (see `backend.sanitize.clean_chunk`)."""
        if not data.isascii():  # ASCII (most logs) is valid UTF-8; isascii scans a word at a time, no copy
            try:
                data.decode("utf-8")  # the UTF-8 check
            except UnicodeDecodeError:
                data = data.decode("utf-8", errors="replace").encode("utf-8")
        clean = clean_chunk(data)
        lines = clean.split(b"\n")
        lines.pop()  # the empty remainder after the final newline
        lens = list(map(len, lines))
        if max(lens, default=0) > self.line_cap:
            lines = [_cap_bytes(b, self.line_cap) for b in lines]
            clean = b"\n".join(lines) + b"\n"
            lens = list(map(len, lines))
        base, nlines = len(self._cum) - 1, len(lines)
        cum = itertools.accumulate(lens, initial=self._cum[-1])
        next(cum)
        try:
            self._write(clean)
            self._cum.extend(cum)
        except Exception:
            del self._cum[base + 1 :]
            raise
        with self._new_lines:
            self._n = base + nlines
            self._new_lines.notify_all()
        if self._listeners:
            text = clean.decode("utf-8")
            for listener in list(self._listeners):
                listener(base, nlines, text)
        return nlines

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        pos = self._offset(len(self._cum) - 1)
        while view:
            written = os.pwrite(self._fd, view, pos)
            view = view[written:]
            pos += written

    def _offset(self, i: int) -> int:
        """Byte offset of line i in the spool (i == len: the end)."""
        return self._cum[i] + i

    def _ensure_sources(self, stop: int) -> None:
        """Extend the per-line source index to line `stop` (reads the new lines back from the spool)."""
        with self._src_lock:
            a = len(self._src)
            while a < stop:
                b = _block_end(self, a, stop, _INDEX_BLOCK)
                block = self._read(a, b)
                lines = block.split(b"\n")
                lines.pop()
                self._src.extend(map(self._source_ids.__getitem__,
                                     map(_FIRST, map(bytes.partition, lines, itertools.repeat(b") ")))))
                if self._unnamed:
                    self._learn_proc_names(block.decode("utf-8", errors="replace"))
                a = b

    def _register_source(self, prefix: str) -> int:
        sid = len(self._sources)
        if sid >= _MAX_SOURCES:
            return 0
        actor, pid, ip = _parse_inner(prefix)
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
            m = _BRACKET_AT.match(text, pos + len(head) - 1) if pos >= 0 else None
            if m is not None:
                proc = m["proc"]
                rank = _RANK.search(proc)
                self._sources[sid] = Source(sid, src.prefix, src.actor, src.pid, src.ip, proc,
                                            int(rank.group(1)) if rank else None)
                self._unnamed.pop(sid, None)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._n

    @property
    def pending_text(self) -> str:
        """The partial last line (not yet terminated), sanitised; shown but not indexed."""
        return cap_line(sanitize_text(self._pending.decode("utf-8", errors="replace")), self.line_cap)

    def sources(self) -> list[Source]:
        """Every process seen so far (indexes new lines first: call it off the UI thread on a big log)."""
        self._ensure_sources(self._n)
        return list(self._sources)

    def _read(self, start: int, stop: int) -> bytes:
        first, end = self._offset(start), self._offset(stop)
        try:
            return os.pread(self._fd, end - first, first)
        except OSError as err:
            raise LogStoreError(f"cannot read the log spool {self.path}: {err.strerror}") from None

    def text(self, i: int) -> str:
        """Line i's sanitised text, without parsing fields."""
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._read(i, i + 1)[:-1].decode("utf-8", errors="replace")

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
        texts = self._read(start, stop).decode("utf-8", errors="replace").split("\n")
        return [self._remember(self._make_line(i, t)) for i, t in zip(range(start, stop), texts, strict=False)]

    def _remember(self, line: LogLine) -> LogLine:
        with self._cache_lock:
            self._cache[line.index] = line
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return line

    def _make_line(self, i: int, text: str) -> LogLine:
        repeat = 1
        if text.endswith(")") or text.endswith("cluster]"):
            suffix = REPEATED.search(text)
            if suffix is not None:
                repeat, text = int(suffix.group(1)), text[: suffix.start()]
        rest, actor, pid, ip, known = text, None, None, None, self._sources[0]
        m = _PREFIX.match(rest)
        if m is not None:
            key = ("(" + m["inner"]).encode("utf-8")
            if _PREFIX_KEY.fullmatch(key):
                rest = rest[m.end() :]
                actor, pid, ip = _parse_inner(m["inner"])
                sid = self._source_ids.get(key)
                known = self._sources[sid] if sid is not None else None
        b = _BRACKET.match(rest)
        ts = proc = file = None
        if b is not None:
            ts, proc, file = b["ts"], b["proc"], b["file"]
            rest = rest[b.end() :]
        proc = proc or (known.proc if known is not None else None)
        rank_m = _RANK.search(proc) if proc else None
        return LogLine(
            index=i, text=text, message=rest, actor=actor, pid=pid, ip=ip, node=ip or HEAD_NODE, proc=proc,
            rank=int(rank_m.group(1)) if rank_m else None, ts=ts, file=file,
            level=LEVEL_NAMES[level_of(text)], repeat=repeat,
        )

    def wait_for_lines(self, count: int, timeout: float | None = None) -> bool:
        """Block until at least `count` lines exist (for followers that poll without callbacks)."""
        with self._new_lines:
            return self._new_lines.wait_for(lambda: self._n >= count or self._closed, timeout)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(first_index, count, sanitised_text)` from the writer's thread after each batch.

        Returns a function that unsubscribes. Keep listeners quick (post a message, bump a counter).
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # ------------------------------------------------------------------ filtering and search

    def filtered(self, flt: LineFilter) -> FilteredLines:
        """A view of the lines `flt` accepts; call `refresh()` to scan (and later to catch up)."""
        return FilteredLines(self, flt)

    def _allowed_sources(self, flt: LineFilter | None) -> set[int] | None:
        if flt is None or flt == LineFilter(min_level=flt.min_level):
            return None
        return {s.id for s in self._sources if flt.accepts(s)}

    def search(self, pattern: str, **kwargs: Any) -> Iterator[int]:
        """Yield the indices of matching lines in order (see `search_batches` for the arguments)."""
        for batch in self.search_batches(pattern, **kwargs):
            yield from batch

    def search_batches(
        self,
        pattern: str,
        *,
        regex: bool = False,
        ignore_case: bool = False,
        start: int = 0,
        stop: int | None = None,
        flt: LineFilter | None = None,
        cancel: CancelToken | None = None,
        block_bytes: int = 1 << 20,
    ) -> Iterator[array]:
        """Matching line indices, one array per block of spool; stops at the next block once `cancel` is set.

        Reads the spool in blocks of about 1 MiB (small enough that the passes over a block run in the CPU
        cache, big enough that the per-block Python work is noise) and matches over a whole block:
        bytes.count / find, a few C passes that turn the block into a flag byte per line when hits are
        dense, or one compiled regex. Python-level work per line happens only for hits of sparse searches.
        """
        if not pattern:
            return
        finder = _make_finder(pattern, regex, ignore_case)
        by_source = flt is not None and self._allowed_sources(flt) is not None
        min_level = _LEVEL_CODES.get(flt.min_level or "info", 0) if flt else 0
        stop = self._n if stop is None else min(stop, self._n)
        a = max(0, start)
        while a < stop:
            if cancel is not None and cancel.cancelled:
                return
            b = _block_end(self, a, stop, block_bytes)
            hits = finder(self._read(a, b), a)
            if by_source and hits:
                self._ensure_sources(b)
                allowed, src = self._allowed_sources(flt) or set(), self._src
                hits = array("I", [i for i in hits if src[i] in allowed])
            if min_level and hits:
                hits = array("I", [i for i in hits if level_of(self.text(i)) >= min_level])
            if hits:
                yield hits
            a = b

    def search_background(
        self,
        pattern: str,
        *,
        on_batch: Callable[[list[int]], None] | None = None,
        on_done: Callable[[SearchTask], None] | None = None,
        **kwargs: object,
    ) -> SearchTask:
        """Run `search` in a daemon thread; results accumulate in the task and go to `on_batch` in batches."""
        task = SearchTask(self, pattern, on_batch, on_done, kwargs)
        task.start()
        return task

    def close(self) -> None:
        with self._write_lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
        with self._new_lines:
            self._new_lines.notify_all()

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Offsets:
    """The spool offsets as a sequence, for bisect."""

    def __init__(self, store: LogStore) -> None:
        self._cum = store._cum

    def __getitem__(self, i: int) -> int:
        return self._cum[i] + i

    def __len__(self) -> int:
        return len(self._cum)


def _block_end(store: LogStore, a: int, stop: int, block_bytes: int) -> int:
    """First line index after a block of about `block_bytes` starting at line a (at least one line)."""
    target = store._offset(a) + block_bytes
    b = bisect.bisect_right(_Offsets(store), target, a + 1, stop + 1) - 1
    return max(a + 1, min(b, stop))


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


def _make_finder(pattern: str, regex: bool, ignore_case: bool) -> Callable[[bytes, int], array]:
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
        rx = re.compile(pattern if regex else re.escape(pattern), re.MULTILINE | (re.IGNORECASE if ignore_case else 0))
    except re.error as err:
        raise LogStoreError(f"bad search pattern {pattern!r}: {err}") from None

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


class SearchTask:
    """A search running in its own thread; cancel it any time."""

    BATCH = 256

    def __init__(self, store: LogStore, pattern: str, on_batch: Callable[[list[int]], None] | None,
                 on_done: Callable[[SearchTask], None] | None, kwargs: dict) -> None:
        self.store, self.pattern = store, pattern
        self.token = kwargs.pop("cancel", None) or CancelToken()
        self.matches = array("I")
        self.error: str | None = None
        self.done = threading.Event()
        self._on_batch, self._on_done, self._kwargs = on_batch, on_done, kwargs
        self._thread = threading.Thread(target=self._run, name=f"log-search:{pattern[:20]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self.token.cancel()

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    def join(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def _run(self) -> None:
        try:
            for batch in self.store.search_batches(self.pattern, cancel=self.token, **self._kwargs):
                self.matches.extend(batch)
                for k in range(0, len(batch), self.BATCH):
                    self._flush(batch[k : k + self.BATCH].tolist())
                if self.token.cancelled:
                    break
        except ConsoleError as err:
            self.error = str(err)
        finally:
            self.done.set()
            if self._on_done is not None:
                self._on_done(self)

    def _flush(self, batch: list[int]) -> None:
        if batch and self._on_batch is not None:
            self._on_batch(batch)


class FilteredLines:
    """The lines of a store one `LineFilter` accepts, as a sequence of absolute line indices."""

    def __init__(self, store: LogStore, flt: LineFilter) -> None:
        self.store, self.filter = store, flt
        self.indices = array("I")
        self._scanned = 0
        self._min_level = _LEVEL_CODES.get(flt.min_level or "info", 0)

    def refresh(self, cancel: CancelToken | None = None, block: int = 1 << 20) -> int:
        """Scan lines added since the last refresh; returns how many matched. Safe to call from a thread."""
        store, added = self.store, 0
        by_source = store._allowed_sources(self.filter) is not None
        stop = len(store)
        while self._scanned < stop:
            if cancel is not None and cancel.cancelled:
                break
            step = block if not self._min_level else min(block, 1 << 16)
            a, b = self._scanned, min(stop, self._scanned + step)
            allowed = None
            if by_source:
                store._ensure_sources(b)
                allowed = store._allowed_sources(self.filter)
            candidates: Iterator[int] = iter(range(a, b))
            if allowed is not None:
                candidates = itertools.compress(range(a, b), map(allowed.__contains__, store._src[a:b]))
            if self._min_level:
                levels, lvl = _level_lines(store._read(a, b), a), self._min_level
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
