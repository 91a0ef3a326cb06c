"""Tail miles' structured outputs under `--dump-details`: event logs and the dashboard's streams.

Why: these are the same numbers as the log's metric lines without any text parsing, plus what the log never
says (per-GPU utilisation, open phases, SGLang engine gauges). Files are read by byte offset and only
complete (newline-terminated) lines are consumed, because miles appends while we read; the dashboard's
hour-partitioned streams (`{stream}/YYYYMMDD_HH.jsonl`) and their legacy flat `{stream}.jsonl` are both read.
A malformed line, or one past backend.signals.bounded_json's limits (size, depth, items, digits), is
counted with a sample and skipped, never fatal; a FIFO, device or socket among the files is refused by its
type (backend.regular_files), never opened. Python's json accepts the `NaN` token the dashboard writes.
The directory may not exist yet when a live run is attached: polls find nothing until it appears.

A resumed run swaps `events/` for a checkpoint's copy (miles moves the live one aside as `.trash_*` and
copies the snapshot in): the new files begin with lines already read. Event files are therefore read with
a memory of every line seen (a 16-byte digest each, and events carry microsecond timestamps, so no two are
alike): a copied line is skipped, so nothing is counted twice; and when the directory itself was swapped,
what the old files gained since the last poll is first read from the `.trash_*` directory, so nothing is lost.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.regular_files import NotRegularFileError, open_regular
from backend.signals.bounded_json import DUMP_LINE, JsonLimitError
from backend.signals.bounded_json import loads as bounded_loads
from backend.signals.metrics import MetricRecord, record_from_dashboard, record_from_event

EVENTS = "events"
TRASH_PREFIX = ".trash_"
MAX_READ = 64 << 20  # bytes per file per poll, so one poll of a huge backlog stays bounded
SAMPLE_CHARS = 160


class DumpError(ConsoleError):
    """The dump directory cannot be read."""


class JsonlTail:
    """New complete lines of one growing JSONL file; with
    `dedup`, a line already read is never returned again."""

    def __init__(self, path: Path, dedup: bool = False) -> None:
        self.path = path
        self.offset = 0
        self.bad = 0
        self.bad_sample = ""  # why the first bad line was bad, and its head
        self.refused = ""  # why the file itself was not read (a FIFO, a device, a socket)
        self.skipped = 0  # lines seen before (a restored copy), not returned
        self.ident: tuple[int, int] | None = None  # (device, inode) of the file last read
        self._in_long = False  # inside a line longer than MAX_READ, skipping to its end
        self.size = 0  # the file's size at the last read
        self._seen: set[bytes] | None = set() if dedup else None

    def read_new(self, path: Path | None = None) -> list[dict[str, Any]]:
        """What the file gained since the last read; `path` reads the same file where it was moved to."""
        data = self._read(path)
        if data is None:
            return []
        data = self._past_long_line(data)
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) >= MAX_READ:  # a line longer than one read: skipped and counted, never a wall
                self._bad(f"a line over {MAX_READ >> 20} MiB, skipped", data)
                self.offset += len(data)
                self._in_long = True
            return []
        self.offset += cut + 1
        objects = (self._object(raw) for raw in data[:cut].split(b"\n"))
        return [obj for obj in objects if obj is not None]

    def _read(self, path: Path | None) -> bytes | None:
        """Up to MAX_READ bytes from the offset (0 again for a file replaced or truncated); None when the
        file cannot be read, is not a regular file (said in `refused`) or, moved, is not the one we read."""
        try:
            with open_regular(path or self.path, "dump file") as fh:
                st = os.fstat(fh.fileno())
                ident = (st.st_dev, st.st_ino)
                if path is not None and self.ident is not None and ident != self.ident:
                    return None  # not the file we were reading
                if ident != self.ident or st.st_size < self.offset:  # replaced or truncated: start over
                    self.offset, self._in_long = 0, False
                self.ident = ident
                fh.seek(self.offset)
                self.size = st.st_size
                return fh.read(min(MAX_READ, st.st_size - self.offset))
        except NotRegularFileError as err:
            self.refused = str(err)
            return None
        except OSError:
            return None

    def _object(self, raw: bytes) -> dict[str, Any] | None:
        """One line's JSON object; None for a blank line, one read before (dedup) or a bad one (counted)."""
        if not raw.strip() or self._repeated(raw):
            return None
        try:
            obj = bounded_loads(raw, DUMP_LINE)
        except JsonLimitError as err:
            self._bad(str(err), raw)
            return None
        if isinstance(obj, dict):
            return obj
        self._bad("not a JSON object", raw)
        return None

    def _repeated(self, raw: bytes) -> bool:
        """With dedup: whether this line was read before (counted in `skipped`); else never."""
        if self._seen is None:
            return False
        digest = hashlib.blake2b(raw.strip(), digest_size=16).digest()
        if digest in self._seen:
            self.skipped += 1
            return True
        self._seen.add(digest)
        return False

    @property
    def remaining(self) -> int:
        """Bytes the file held at the last read beyond what was consumed (a poll reads at most MAX_READ);
        an unterminated last line of a live file counts until its newline comes."""
        return max(0, self.size - self.offset)

    def _past_long_line(self, data: bytes) -> bytes:
        """While an oversize line is being skipped: the bytes after its end (none while it goes on)."""
        if not self._in_long:
            return data
        end = data.find(b"\n")
        if end < 0:
            self.offset += len(data)
            return b""
        self._in_long = False
        self.offset += end + 1
        return data[end + 1 :]

    def _bad(self, why: str, raw: bytes) -> None:
        self.bad += 1
        if not self.bad_sample:
            head = raw[:SAMPLE_CHARS].decode("utf-8", errors="replace")
            self.bad_sample = f"{self.path.name}: {why}: {head}" + ("…" if len(raw) > SAMPLE_CHARS else "")


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    """One line of the dashboard's `phases` stream: a phase of one rank, open (`t1` = -1) or closed.
    Times are nan, rank -1, where the line had no number."""

    name: str
    node: str
    rank: int
    role: str
    t0: float
    t1: float

    @property
    def is_open(self) -> bool:
        return self.t1 == -1.0

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> PhaseEvent:
        f = Fields(obj)
        rank = f.reading("rank")
        return cls(
            f.text("name", "None"),
            f.text("node", "None"),
            int(rank) if math.isfinite(rank) else -1,
            f.text("role", "None"),
            f.reading("t0"),
            f.reading("t1"),
        )


@dataclass(frozen=True, slots=True)
class EngineGauge:
    """One line of the dashboard's `engine_series` stream: one SGLang gauge of one engine (and dp rank)."""

    addr: str
    metric: str
    labels: str  # `k=v,...`, sorted: with addr and metric, what tells one gauge from another
    value: float
    ts: float

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> EngineGauge:
        f = Fields(obj)
        return cls(
            f.text("addr", "None"),
            f.text("metric", "None"),
            ",".join(f"{k}={v}" for k, v in sorted(f.obj("labels").raw.items())),
            f.reading("value"),
            f.reading("ts"),
        )


@dataclass
class DumpBatch:
    """What one poll found."""

    records: list[MetricRecord] = field(default_factory=list)
    gpu_util: list[Fields] = field(default_factory=list)
    gpu_processes: list[Fields] = field(default_factory=list)
    phases: list[PhaseEvent] = field(default_factory=list)
    engine_series: list[EngineGauge] = field(default_factory=list)
    meta: Fields | None = None  # the dashboard's meta.json, when it changed

    def extend(self, other: DumpBatch) -> None:
        """Add a later poll's findings to this one."""
        self.records += other.records
        self.gpu_util += other.gpu_util
        self.gpu_processes += other.gpu_processes
        self.phases += other.phases
        self.engine_series += other.engine_series
        self.meta = other.meta or self.meta


class DumpReader:
    """Poll a `--dump-details` directory for new records; call `poll()` as often as you like."""

    def __init__(self, dump_dir: str | os.PathLike[str], *, wait: bool = False) -> None:
        """`wait`: the directory of a live run may not exist yet; without it, a missing one is an error."""
        self.given = Path(dump_dir)
        self.root = self.given
        if not wait and not self.given.is_dir():
            raise DumpError(f"dump directory {self.given} does not exist or is not a directory")
        self._tails: dict[Path, JsonlTail] = {}
        self._meta_mtime = 0.0
        self._events_ident: tuple[int, int] | None = None
        self.swaps = 0  # event-dir restores seen

    def _resolve(self) -> None:
        nested = self.given / "dump_details"  # the run's output dir was given instead of its dump_details
        if not (self.given / EVENTS).is_dir() and not (self.given / "dashboard").is_dir() and nested.is_dir():
            self.root = nested

    @property
    def present(self) -> bool:
        return self.root.is_dir()

    @property
    def bad_lines(self) -> int:
        return sum(t.bad for t in self._tails.values())

    @property
    def bad_sample(self) -> str:
        """Why the first malformed line was skipped, with its head (sanitise before showing it)."""
        return next((t.bad_sample for t in self._tails.values() if t.bad_sample), "")

    @property
    def refused(self) -> list[str]:
        """The files not read because of their type (a FIFO, a device, a socket), one line each."""
        return [t.refused for t in self._tails.values() if t.refused]

    @property
    def progress(self) -> tuple[int, int]:
        """(bytes read, bytes known) over every file read so far."""
        return sum(t.offset for t in self._tails.values()), sum(t.size for t in self._tails.values())

    def poll_whole(self, progress: Callable[[int, int], None] | None = None) -> DumpBatch:
        """Poll until every file is read to its end as it stood (a one-shot reader: `metrics`, a replay),
        never stopping at one poll's MAX_READ; `progress(read, total)` after each poll that left more."""
        batch = self.poll()
        while True:
            read, total = self.progress
            if read >= total:
                return batch
            if progress is not None:
                progress(read, total)
            more = self.poll()
            if self.progress[0] == read:  # nothing consumed (an unterminated last line): done
                return batch
            batch.extend(more)

    @property
    def repeated_lines(self) -> int:
        """Event lines skipped because they had been read before (a restored checkpoint copy)."""
        return sum(t.skipped for t in self._tails.values())

    def _tail(self, path: Path, dedup: bool = False) -> JsonlTail:
        tail = self._tails.get(path)
        if tail is None:
            tail = self._tails[path] = JsonlTail(path, dedup)
        return tail

    def _files(self, stream: str) -> list[Path]:
        base = self.root / "dashboard"
        files = sorted((base / stream).glob("*.jsonl")) if (base / stream).is_dir() else []
        flat = base / f"{stream}.jsonl"
        return ([flat] if flat.is_file() else []) + files

    def _moved_aside(self, ident: tuple[int, int]) -> Path | None:
        """The `.trash_*` directory that is the event dir we were reading, if it was moved aside."""
        for trash in sorted(self.root.glob(f"{TRASH_PREFIX}*"), reverse=True):
            try:
                st = trash.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == ident:
                return trash
        return None

    def _event_objects(self) -> list[dict[str, Any]]:
        events = self.root / EVENTS
        try:
            st = events.stat()
        except OSError:
            return []
        ident = (st.st_dev, st.st_ino)
        out: list[dict[str, Any]] = []
        if self._events_ident is not None and ident != self._events_ident:
            self.swaps += 1
            trash = self._moved_aside(self._events_ident)
            if trash is not None:  # finish what the old files gained before the swap (new files included)
                for moved in sorted(trash.glob("*.jsonl")):
                    out.extend(self._tail(events / moved.name, dedup=True).read_new(moved))
        self._events_ident = ident
        for path in sorted(events.glob("*.jsonl")):
            out.extend(self._tail(path, dedup=True).read_new())
        return out

    def poll(self) -> DumpBatch:
        batch = DumpBatch()
        if self.root == self.given:
            self._resolve()
        if not self.present:
            return batch
        batch.records.extend(self._records())
        for stream in ("gpu_util", "gpu_processes"):
            for path in self._files(stream):
                getattr(batch, stream).extend(map(Fields, self._tail(path).read_new()))
        for path in self._files("phases"):
            batch.phases.extend(map(PhaseEvent.from_json, self._tail(path).read_new()))
        for path in self._files("engine_series"):
            batch.engine_series.extend(map(EngineGauge.from_json, self._tail(path).read_new()))
        batch.meta = self._read_meta()
        return batch

    def _records(self) -> list[MetricRecord]:
        """The metric records of the event files, then of the dashboard's metrics stream."""
        records = [record_from_event(obj) for obj in self._event_objects()]
        records += [
            record_from_dashboard(item)
            for path in self._files("metrics")
            for item in self._tail(path).read_new()
        ]
        return [rec for rec in records if rec is not None]

    def _read_meta(self) -> Fields | None:
        path = self.root / "dashboard" / "meta.json"
        try:
            mtime = path.stat().st_mtime
            if mtime == self._meta_mtime:
                return None
            with open_regular(path, "dump file") as fh:
                meta = bounded_loads(fh.read(DUMP_LINE.max_chars + 1), DUMP_LINE)
        except (OSError, ValueError, NotRegularFileError):  # unreadable, malformed, past the limits, a FIFO
            return None
        self._meta_mtime = mtime
        return Fields(meta) if isinstance(meta, dict) else None
