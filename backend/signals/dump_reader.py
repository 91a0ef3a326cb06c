"""Tail miles' structured outputs under `--dump-details`: event logs and the dashboard's streams.

Why: these are the same numbers as the log's metric lines without any text parsing, plus what the log never
says (per-GPU utilisation, open phases, SGLang engine gauges). Files are read by byte offset and only
complete (newline-terminated) lines are consumed, because miles appends while we read; the dashboard's
hour-partitioned streams (`{stream}/YYYYMMDD_HH.jsonl`) and their legacy flat `{stream}.jsonl` are both read.
A malformed line is counted and skipped, never fatal. Python's json accepts the `NaN` token the dashboard
writes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.signals.metrics import MetricRecord, record_from_dashboard, record_from_event

STREAMS = ("gpu_util", "phases", "engine_series")
MAX_READ = 64 << 20  # bytes per file per poll, so one poll of a huge backlog stays bounded


class DumpError(ConsoleError):
    """The dump directory cannot be read."""


class JsonlTail:
    """New complete lines of one growing JSONL file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset = 0
                fh.seek(self.offset)
                data = fh.read(min(MAX_READ, size - self.offset))
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
            try:
                obj = json.loads(raw)
            except ValueError:
                self.bad += 1
                continue
            if isinstance(obj, dict):
                out.append(obj)
            else:
                self.bad += 1
        return out


@dataclass
class DumpBatch:
    """What one poll found."""

    records: list[MetricRecord] = field(default_factory=list)
    gpu_util: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    engine_series: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] | None = None


class DumpReader:
    """Poll a `--dump-details` directory for new records; call `poll()` as often as you like."""

    def __init__(self, dump_dir: str | os.PathLike[str]) -> None:
        self.root = Path(dump_dir)
        if not self.root.is_dir():
            raise DumpError(f"dump directory {self.root} does not exist or is not a directory")
        nested = self.root / "dump_details"  # the run's output dir was given instead of its dump_details
        if not (self.root / "events").is_dir() and not (self.root / "dashboard").is_dir() and nested.is_dir():
            self.root = nested
        self._tails: dict[Path, JsonlTail] = {}
        self._meta_mtime = 0.0

    @property
    def bad_lines(self) -> int:
        return sum(t.bad for t in self._tails.values())

    def _tail(self, path: Path) -> JsonlTail:
        tail = self._tails.get(path)
        if tail is None:
            tail = self._tails[path] = JsonlTail(path)
        return tail

    def _files(self, stream: str) -> list[Path]:
        base = self.root / "dashboard"
        files = sorted((base / stream).glob("*.jsonl")) if (base / stream).is_dir() else []
        flat = base / f"{stream}.jsonl"
        return ([flat] if flat.is_file() else []) + files

    def poll(self) -> DumpBatch:
        batch = DumpBatch()
        events = self.root / "events"
        if events.is_dir():
            for path in sorted(events.glob("*.jsonl")):
                for obj in self._tail(path).read_new():
                    rec = record_from_event(obj)
                    if rec is not None:
                        batch.records.append(rec)
        for path in self._files("metrics"):
            for item in self._tail(path).read_new():
                rec = record_from_dashboard(item)
                if rec is not None:
                    batch.records.append(rec)
        for stream in STREAMS:
            bucket = getattr(batch, stream)
            for path in self._files(stream):
                bucket.extend(self._tail(path).read_new())
        batch.meta = self._read_meta()
        return batch

    def _read_meta(self) -> dict[str, Any] | None:
        path = self.root / "dashboard" / "meta.json"
        try:
            mtime = path.stat().st_mtime
            if mtime == self._meta_mtime:
                return None
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        self._meta_mtime = mtime
        return meta if isinstance(meta, dict) else None


def num(value: Any) -> float:
    """A JSON number as float (nan for anything else)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)
