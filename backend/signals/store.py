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
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.errors import ConsoleError
from backend.safe_paths import PrivateDir, UnsafePath, safe_name
from backend.sanitize import DEFAULT_LINE_CAP, TRUNCATION_MARK, cap_line, clean_chunk_counted, sanitize_text
from backend.signals import grammar
from backend.signals.grammar import HEAD_NODE, LEVEL_NAMES, level_of

_FIRST = operator.itemgetter(0)
_INDEX_BLOCK = 4 << 20  # bytes of spool per step of the (lazy) source index
_MAX_SOURCES = 65535
_LEARN_CHUNKS = 4
# A log with no line feed in its first CR_SNIFF bytes but carriage returns is CR-only (old Mac line ends, some
# Windows tools' logs): its lines are split on CR, not kept as one line rewritten by `\r` (issue 36).
CR_SNIFF = 8 << 10
_BAD_UTF8 = re.compile("[\udc80-\udcff]")  # what `surrogateescape` makes of each invalid byte
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


@dataclass(frozen=True, slots=True)
class UnreadableBytes:
    """What of a log could not be read as text, counted, never a reason to refuse the log: crashed nodes
    leave NUL-padded tails, a torn write leaves invalid UTF-8, a binary blob stray controls."""

    nul: int = 0  # NUL bytes, dropped (a NUL-padded tail, a sparse head after copytruncate)
    invalid_utf8: int = 0  # bytes that are no UTF-8, each run shown as one U+FFFD
    controls: int = 0  # stray control bytes (not tab, LF, CR, ESC, BEL), dropped
    long_lines: int = 0  # lines over the store's cap, cut and marked

    @property
    def bytes(self) -> int:
        return self.nul + self.invalid_utf8 + self.controls

    def __bool__(self) -> bool:
        return bool(self.bytes or self.long_lines)

    def text(self) -> str:
        """One line: how much and of what ("" when everything was read)."""
        parts = [
            f"{n:,} {what}"
            for n, what in (
                (self.nul, "NUL"),
                (self.invalid_utf8, "invalid UTF-8"),
                (self.controls, "control"),
            )
            if n
        ]
        said = f"{self.bytes:,} unreadable byte(s) dropped ({', '.join(parts)})" if parts else ""
        if self.long_lines:
            cut = f"{self.long_lines:,} line(s) over the line cap cut"
            said = f"{said}; {cut}" if said else cut
        return said

    def to_json(self) -> dict[str, int]:
        return {
            "bytes": self.bytes,
            "nul": self.nul,
            "invalid_utf8": self.invalid_utf8,
            "controls": self.controls,
            "long_lines": self.long_lines,
        }


def default_spool_dir() -> Path:
    from backend.settings import load_settings

    return load_settings().state_dir / "spool"


def _cr_lines(data: bytes) -> bytes:
    """A CR-only log's bytes with every line end a line feed (a CRLF among them stays one line end)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


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
        self.unreadable = UnreadableBytes()
        self._cr_only: bool | None = None  # undecided until a line feed, or CR_SNIFF bytes without one
        self._pending = b""
        self._pending_dropped = 0
        self._caret_codes = False  # the log spells colour codes as text (`^[[36m`)
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
        data = chunk.encode("utf-8", errors="replace") if isinstance(chunk, str) else bytes(chunk)
        if not data:
            return 0
        with self._write_lock:
            if b"\x00" in data:  # memchr: dropped before lines are cut, so a NUL run never hides a line
                self._count(nul=data.count(b"\x00"))
                data = data.replace(b"\x00", b"")
            if self._cr_only is None:
                data = self._line_ends(data)
            elif self._cr_only:
                data = _cr_lines(data)
            cut = data.rfind(b"\n")
            if cut < 0:
                self._hold(data)
                return 0
            head = self._complete_lines(data, cut + 1)
            self._pending = b""
            self._hold(data[cut + 1 :])
            return self._ingest(head)

    def flush(self) -> int:
        """Store the partial last line too (end of the log)."""
        with self._write_lock:
            if not self._pending and not self._pending_dropped:
                return 0
            if self._cr_only is None and not self._pending_dropped and b"\r" in self._pending.rstrip(b"\r"):
                self._cr_only = True  # a short log with carriage returns and never a line feed
                lines = _cr_lines(self._pending)
                self._pending = b""
                return self._ingest(lines if lines.endswith(b"\n") else lines + b"\n")
            head = self._join_pending(b"\n")
            self._pending = b""
            return self._ingest(head)

    def _count(self, **more: int) -> None:
        u = self.unreadable
        self.unreadable = UnreadableBytes(
            u.nul + more.get("nul", 0),
            u.invalid_utf8 + more.get("invalid_utf8", 0),
            u.controls + more.get("controls", 0),
            u.long_lines + more.get("long_lines", 0),
        )

    def _line_ends(self, data: bytes) -> bytes:
        """Decide, once, whether the log ends its lines with CR alone; returns `data` as lines to cut."""
        if b"\n" in data:
            self._cr_only = False  # LF or CRLF: a CR inside a line is a progress bar's redraw
            return data
        held = len(self._pending) + len(data)
        if held < CR_SNIFF or (self._pending.count(b"\r") + data.count(b"\r")) < 2:
            return data
        self._cr_only = True
        data, self._pending = _cr_lines(self._pending + data), b""
        return data

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

    def _complete_lines(self, data: bytes, end: int) -> bytes:
        """The held partial line and `data[:end]` as one bytes object, with one copy of the chunk, not two
        (a slice, then the join), or none when the chunk ends on a line end and nothing is held."""
        if self._pending_dropped:
            return self._join_pending(data[:end])
        if self._pending:
            return self._pending + memoryview(data)[:end]
        return data if end == len(data) else data[:end]

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
        clean, lines, lens = self._cut(self._cleaned(data))
        base, nlines = len(self._cum) - 1, len(lines)
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

    def _cleaned(self, data: bytes) -> bytes:
        """A chunk of complete lines as valid UTF-8, sanitised, Ray's colour codes spelt as text gone."""
        if not data.isascii():  # ASCII (most logs) is valid UTF-8; isascii scans a word at a time, no copy
            try:
                data.decode("utf-8")  # the UTF-8 check
            except UnicodeDecodeError:
                data = self._readable(data)
        clean, stray = clean_chunk_counted(data)
        if stray:
            self._count(controls=stray)
        # Pasted logs spell Ray's colour codes out as `^[[36m`, on nearly every line: a chunk's head tells,
        # and once a log has shown them every chunk is checked whole.
        if clean.find(grammar.LITERAL_COLOUR_HINT, 0, None if self._caret_codes else 65536) >= 0:
            self._caret_codes = True
            clean = grammar.LITERAL_COLOUR_BYTES.sub(b"", clean)
        return clean

    def _cut(self, clean: bytes) -> tuple[bytes, list[bytes], list[int]]:
        """(the chunk, its lines, their lengths), lines over the cap cut and marked (counted)."""
        lines = clean.split(b"\n")
        lines.pop()  # the empty remainder after the final newline
        lens = list(map(len, lines))
        if max(lens, default=0) > self.line_cap:
            self._count(long_lines=sum(1 for n in lens if n > self.line_cap))
            lines = [_cap_bytes(b, self.line_cap) for b in lines]
            clean = b"\n".join(lines) + b"\n"
            lens = list(map(len, lines))
        return clean, lines, lens

    def _readable(self, data: bytes) -> bytes:
        """Invalid UTF-8 counted byte by byte, each byte one U+FFFD (the text around it kept)."""
        text, bad = _BAD_UTF8.subn("\ufffd", data.decode("utf-8", errors="surrogateescape"))
        self._count(invalid_utf8=bad)
        return text.encode("utf-8")

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
        return cap_line(sanitize_text(self._pending.decode("utf-8", errors="replace")), self.line_cap)

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
