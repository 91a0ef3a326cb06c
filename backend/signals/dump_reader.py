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
from collections.abc import Mapping
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
        self._seen: set[bytes] | None = set() if dedup else None

    def read_new(self, path: Path | None = None) -> list[dict[str, Any]]:
        """What the file gained since the last read; `path` reads the same file where it was moved to."""
        try:
            with open_regular(path or self.path, "dump file") as fh:
                st = os.fstat(fh.fileno())
                ident = (st.st_dev, st.st_ino)
                if path is not None and self.ident is not None and ident != self.ident:
                    return []  # not the file we were reading
                if ident != self.ident or st.st_size < self.offset:  # replaced or truncated: start over
                    self.offset = 0
                self.ident = ident
                fh.seek(self.offset)
                data = fh.read(min(MAX_READ, st.st_size - self.offset))
        except NotRegularFileError as err:
            self.refused = str(err)
            return []
        except OSError:
            return []
        cut = data.rfind(b"\n")
        if cut < 0:
            return []
        self.offset += cut + 1
        out = []
        for raw in data[:cut].split(b"\n"):
            if not raw.strip():
                continue
            if self._seen is not None:
                digest = hashlib.blake2b(raw.strip(), digest_size=16).digest()
                if digest in self._seen:
                    self.skipped += 1
                    continue
                self._seen.add(digest)
            try:
                obj = bounded_loads(raw, DUMP_LINE)
            except JsonLimitError as err:
                self._bad(str(err), raw)
                continue
            if isinstance(obj, dict):
                out.append(obj)
            else:
                self._bad("not a JSON object", raw)
        return out

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
        for obj in self._event_objects():
            rec = record_from_event(obj)
            if rec is not None:
                batch.records.append(rec)
        for path in self._files("metrics"):
            for item in self._tail(path).read_new():
                rec = record_from_dashboard(item)
                if rec is not None:
                    batch.records.append(rec)
        for stream in ("gpu_util", "gpu_processes"):
            for path in self._files(stream):
                getattr(batch, stream).extend(map(Fields, self._tail(path).read_new()))
        for path in self._files("phases"):
            batch.phases.extend(map(PhaseEvent.from_json, self._tail(path).read_new()))
        for path in self._files("engine_series"):
            batch.engine_series.extend(map(EngineGauge.from_json, self._tail(path).read_new()))
        batch.meta = self._read_meta()
        return batch

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
