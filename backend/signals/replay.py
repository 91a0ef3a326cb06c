"""Replay: a finished run read back from what it left (a saved Ray job log or a `--dump-details` directory),
through the same LogStore and RunMonitor a live run uses, plus the rollout index the replay cursor steps on.

Why the first chunk is separate: the operator should see the log at once, as with toolong; so the opener
reads a small first piece (which the app shows on its first frame) and the rest streams into the store in a
worker while the charts fill. A dump directory has no log: its metric events are written as log lines in
miles' own shape (`[ts proc] events - step 6: {...}`), so search, filters, jump-to-time and the rollout
cursor work on it the same way; its metrics reach the monitor from the dump itself, not from those lines.
"""

from __future__ import annotations

import bisect
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from backend.errors import ConsoleError
from backend.regular_files import NotRegularFileError, open_regular
from backend.signals.compare import RunSide
from backend.signals.dump_reader import DumpError, DumpReader
from backend.signals.front_process import PIECE, FrontLost, FrontProcess
from backend.signals.launch_flags import ArgumentDump, LaunchFlags, flags_from_command
from backend.signals.metrics import MetricRecord, parse_ts

if TYPE_CHECKING:
    from backend.signals.compare import RunSide
from backend.signals.monitor import RunMonitor
from backend.signals.series import SeriesSetSnapshot
from backend.signals.store import LogStore

FIRST_CHUNK = 64 << 10
CHUNK = 4 << 20
# A log with at least this much left after its first piece is cut into lines by a second process
# (backend.signals.front_process): the interpreter the screen needs is not spent on it.
FRONT_PROCESS_FROM = 16 << 20
# The end of a metric line's head in any miles shape (`... - step 6`, a bare `step 6`), just before its `: {`.
_KIND_BEFORE = re.compile(r"(?:^|[\s\]-])(rollout|perf|step) (\d+)$")

SourceKind = Literal["log", "dump", "job"]


class ReplayError(ConsoleError):
    """What was given to replay cannot be read (one line for the operator)."""


@dataclass(frozen=True)
class ReplaySource:
    """What replay opens: a saved log file, a dump directory, or a job on the cluster."""

    kind: SourceKind
    path: Path | None = None
    job_id: str | None = None

    @property
    def name(self) -> str:
        return self.job_id or (self.path.name if self.path else "replay")


def detect_source(path: str | os.PathLike[str]) -> ReplaySource:
    """A file is a log, a directory a dump (its `dump_details`
    inside, too); anything else is one clear line."""
    p = Path(path).expanduser()
    if p.is_dir():
        try:
            DumpReader(p)
        except DumpError as err:
            raise ReplayError(str(err)) from None
        inner = p / "dump_details"
        if not any((d / sub).is_dir() for d in (p, inner) for sub in ("events", "dashboard", "rollout_data")):
            raise ReplayError(
                f"{p} is a directory but not a --dump-details directory "
                "(no events/, dashboard/ or rollout_data/)"
            )
        return ReplaySource("dump", p)
    if not p.exists():
        raise ReplayError(f"no such file or directory: {p}")
    try:
        with open_regular(p, "log file") as fh:
            fh.read(1)
    except NotRegularFileError as err:
        raise ReplayError(str(err)) from None
    except OSError as err:
        raise ReplayError(f"cannot read {p}: {err.strerror}") from None
    return ReplaySource("log", p)


_JOB_ID = re.compile(r"^[A-Za-z0-9_:-]+$")


def source_of(target: str) -> ReplaySource:
    """A path that exists is a log or a dump; a bare name (no `/`, no dot) that is no file is a job's id."""
    if not Path(target).expanduser().exists() and _JOB_ID.match(target):
        return ReplaySource("job", job_id=target)
    return detect_source(target)


@dataclass(frozen=True)
class RolloutMark:
    """Where rollout `n` starts in the log, and its first optimizer step (the KL chart's x axis)."""

    n: int
    first_line: int
    first_step: int | None


class RolloutIndex:
    """The rollouts of a log and the line each starts on, built as lines arrive (`LogStore.subscribe`).

    Rollout N starts on the line after the last line that named rollout N-1 (its `rollout N-1` and `perf N-1`
    dicts close it in every miles version); rollout 0 starts on line 0."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}  # rollout -> last line naming it
        self._steps: list[tuple[int, int]] = []  # (line, step), in line order

    def on_lines(self, first: int, count: int, text: str) -> None:
        """Metric dicts are rare among log lines: their `: {` is found through its `{` (memchr), then the
        head just before it is read."""
        line, last = first, 0
        for pos in _dict_openings(text):
            m = _KIND_BEFORE.search(text, max(0, pos - 24), pos)
            if m is None:
                continue
            line += text.count("\n", last, pos)
            last = pos
            kind, n = m.group(1), int(m.group(2))
            if kind == "step":
                self._steps.append((line, n))
            else:
                self._last[n] = max(line, self._last.get(n, -1))

    @property
    def rollouts(self) -> list[int]:
        return sorted(self._last)

    def mark(self, n: int) -> RolloutMark:
        before = [r for r in self._last if r < n]
        first = self._last[max(before)] + 1 if before else 0
        step = next((s for line, s in self._steps if line >= first), None)
        return RolloutMark(n, first, step)

    def step(self, current: int | None, delta: int) -> RolloutMark | None:
        """The mark `delta` rollouts from `current` (None: the
        first or the last), clamped; None if none known."""
        known = self.rollouts
        return self.mark(_stepped(known, current, delta)) if known else None


DENSE_BRACES = 4096  # `{` seen in a chunk before its `: {` is searched for whole instead (a JSON-heavy log)


def _dict_openings(text: str) -> Iterator[int]:
    """Each start of `: {` in `text`, in order. Through its `{`, a one-character find (memchr: 0.06 ms a MB
    here against 1 ms for `str.find(": {")`, whose skip table has little to skip by); a log dense with
    braces goes over to the whole-needle find after DENSE_BRACES of them, so neither way costs more than
    a pass plus a bounded number of checks."""
    pos, braces = text.find("{", 2), 0
    while pos >= 0 and braces < DENSE_BRACES:
        braces += 1
        if text.startswith(": ", pos - 2):
            yield pos - 2
        pos = text.find("{", pos + 1)
    pos = text.find(": {", pos - 2) if pos >= 0 else -1
    while pos >= 0:
        yield pos
        pos = text.find(": {", pos + 3)


def _stepped(known: list[int], current: int | None, delta: int) -> int:
    """The rollout after (delta > 0) or before `current` in the sorted `known`, clamped to its ends; with no
    current, the first (forward) or the last."""
    if current is None:
        return known[0] if delta > 0 else known[-1]
    if delta > 0:
        return known[min(bisect.bisect_right(known, current), len(known) - 1)]
    return known[max(bisect.bisect_left(known, current) - 1, 0)]


def read_first(path: Path, size: int = FIRST_CHUNK) -> bytes:
    """The small first piece of a log, shown on the app's first frame."""
    try:
        with open_regular(path, "log file") as fh:
            return fh.read(size)
    except NotRegularFileError as err:
        raise ReplayError(str(err)) from None
    except OSError as err:
        raise ReplayError(f"cannot read {path}: {err.strerror}") from None


def _stamp(ts: float) -> str:
    if not math.isfinite(ts):
        return "0000-00-00 00:00:00.000"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:23]


def record_line(rec: MetricRecord) -> str:
    """A dump's metric record as a line in miles' newest log shape."""
    kind = "perf" if rec.kind.startswith("perf") else rec.kind
    values = ", ".join(f"{k!r}: {v!r}" for k, v in rec.values.items())
    return f"[{_stamp(rec.ts)} {rec.proc}] events - {kind} {rec.n}: {{{values}}}"


def dump_log_text(records: list[MetricRecord]) -> str:
    """Every record of a dump as log lines, in time order (a record without a time keeps its place)."""
    ordered = sorted(
        enumerate(records), key=lambda p: (p[1].ts if math.isfinite(p[1].ts) else -math.inf, p[0])
    )
    return "".join(record_line(rec) + "\n" for _, rec in ordered)


class ReplaySession:
    """The store, monitor and rollout index of one replay; the command opens it (first chunk included)
    before the app starts, and a worker calls `load()` for the rest."""

    def __init__(
        self,
        source: ReplaySource,
        spool_dir: str | os.PathLike[str],
        *,
        front_from: int = FRONT_PROCESS_FROM,
        front_piece: int = PIECE,
    ) -> None:
        """`front_from`: a log with this many bytes left after its first piece is cut by a front process,
        started here, so it cuts while the app starts; `front_piece`: its pieces' size."""
        self.source = source
        self.store = LogStore(spool_dir, run_id=f"replay-{source.name}")
        self.rollouts = RolloutIndex()
        self.store.subscribe(self.rollouts.on_lines)
        self.arguments = (
            ArgumentDump()
        )  # what it was launched with, when its log says (a comparison shows it)
        self.store.subscribe(self.arguments.on_lines)
        self.entrypoint: str | None = None  # a job's command line, from Ray's record of it
        self.job_status: str | None = None
        self.problem: str | None = None
        try:
            self.monitor: RunMonitor | None = RunMonitor()
        except ConsoleError as err:  # a broken alert rules file: the log still replays
            self.monitor, self.problem = None, f"metrics and alerts are off: {err}"
        if self.monitor is not None and source.kind != "dump":
            self.store.subscribe(self.monitor.on_log_lines)
        self._offset = 0
        self._done = False
        self.front_from = front_from
        self.front_piece = front_piece
        self._front: FrontProcess | None = None
        self.front_lost: str | None = None  # why the front process stopped short (the rest was read here)
        if source.kind == "log" and source.path is not None:
            first = read_first(source.path)
            end = first.rfind(b"\n") + 1  # the first piece ends at a line end: the rest can be cut elsewhere
            first = first[:end] if end else first
            self._offset = len(first)
            self.store.append(first)
            self._start_front(source.path)

    def load_step(self, size: int = CHUNK) -> bool:
        """Read the next piece of a log file (or the whole dump); False once everything is in. Blocking: call
        it from a worker thread, and post to the UI from the worker's own context between calls."""
        path = self.source.path
        if path is None or self._done:
            return False
        if self.source.kind == "dump":
            self._load_dump(path)
            return False
        if self._front is not None:
            taken = self._from_front()
            if taken is not None:
                return taken
        return self._read_piece(path, size)

    def _load_dump(self, path: Path) -> None:
        records = DumpReader(path).poll_whole().records  # every file whole, never one poll's 64 MiB
        if self.monitor is not None:
            self.monitor.attach_dump(path)
            self.monitor.poll_dump(whole=True)
        self.store.append(dump_log_text(records))
        self._done = True

    def _read_piece(self, path: Path, size: int) -> bool:
        """The next piece read here, into the store; False at the log's end."""
        try:
            with open_regular(path, "log file") as fh:
                fh.seek(self._offset)
                chunk = fh.read(size)
        except NotRegularFileError as err:
            self._done = True
            raise ReplayError(str(err)) from None
        except OSError as err:
            self._done = True
            raise ReplayError(f"cannot read {path}: {err.strerror}") from None
        if not chunk:
            self._done = True
            return False
        self._offset += len(chunk)
        self.store.append(chunk)
        self._say_unreadable()
        return True

    def _start_front(self, path: Path) -> bool:
        """Hand the rest of a big log to a front process, where the store holds no partial line."""
        front = self.store.front
        try:
            if (
                front.holds
                or front.cr_only is not False
                or path.stat().st_size - self._offset < self.front_from
            ):
                return False
            self._front = FrontProcess(
                path, self._offset, self.store.line_cap, caret_codes=front.caret_codes, piece=self.front_piece
            )
        except (OSError, ConsoleError):
            return False  # read here instead: the same lines
        return True

    def _from_front(self) -> bool | None:
        """The front process's next piece into the store: True when one was taken, False at the log's end,
        None when the process is gone (the rest is read here, from the last line end it delivered)."""
        assert self._front is not None
        try:
            frame = self._front.next()
        except FrontLost as err:
            self.front_lost = str(err)
            self._offset = self._front.consumed
            self._close_front()
            return None
        if frame is None:
            self._offset = self._front.consumed
            self._close_front()
            self._done = True
            return False
        self._offset = frame.consumed
        if frame.caret_codes:
            self.store.front.caret_codes = True
        self.store.add_cut(frame.cut, frame.unreadable)
        self._say_unreadable()
        return True

    def _close_front(self) -> None:
        if self._front is not None:
            self._front.close()
            self._front = None

    def _say_unreadable(self) -> None:
        if self.monitor is not None and self.store.unreadable:
            self.monitor.note_unreadable(self.store.unreadable)

    def read_all(self) -> None:
        """Read a log file or dump to its end and finish (blocking: a worker thread or the CLI)."""
        while self.load_step():
            pass
        self.finish()

    def append_lines(self, lines: list[str]) -> None:
        """Lines of a job's log read from the cluster."""
        if lines:
            self.store.append("\n".join(lines) + "\n")
            self._say_unreadable()

    def finish(self) -> None:
        """End of input: the last partial line, and the time-based alerts as of the log's end."""
        self._close_front()
        self.store.flush()
        self._say_unreadable()
        monitor = self.monitor
        if monitor is None:
            return
        monitor.input_ended()
        now = monitor.end_of_log()
        if not math.isfinite(now):
            now = (
                monitor.telemetry.last_ts
                if math.isfinite(monitor.telemetry.last_ts)
                else monitor.collector.last_ts
            )
        monitor.tick(now=now, dashboard_now=monitor.telemetry.last_ts)

    def launch_flags(self) -> LaunchFlags | None:
        """The flags it was launched with: the job's entrypoint where known, else the log's argument dump."""
        flags = flags_from_command(self.entrypoint) if self.entrypoint else None
        return flags or self.arguments.flags()

    def log_span(self) -> tuple[float, float] | None:
        """The first and the newest timestamp read so far (miles' clock): when the replayed run started and
        how far it got, which the wall clock during a replay
        says nothing about. None before a stamped line."""
        if self.source.kind == "dump":  # its events, as lines in time order (the monitor reads the files)
            first, last = (
                self._stamp_at(range(len(self.store))),
                self._stamp_at(range(len(self.store) - 1, -1, -1)),
            )
        elif self.monitor is not None:
            first, last = self.monitor.activity.first_ts, self.monitor.end_of_log()
        else:
            return None
        return (first, last) if math.isfinite(first) and math.isfinite(last) and last >= first else None

    def _stamp_at(self, order: range, most: int = 1000) -> float:
        """The first valid timestamp of the store's lines in `order` (at most `most` looked at)."""
        for i in order[:most]:
            ts = self.store.line(i).ts
            stamp = parse_ts(ts) if ts else math.nan
            if math.isfinite(stamp):
                return stamp
        return math.nan

    def state(self) -> str:
        """FAILED when the log names a cause, else the job's final status, else SAVED (a log or dump)."""
        if self.monitor is not None and self.monitor.diagnosis() is not None:
            return "FAILED"
        return self.job_status or "SAVED"

    def side(self, label: str | None = None) -> RunSide:
        """This run as one side of a comparison (backend.signals.compare), as of now."""
        series = (
            self.monitor.metrics_snapshot().series
            if self.monitor is not None
            else SeriesSetSnapshot(MappingProxyType({}))
        )
        return RunSide(label or self.source.name, self.state(), series, self.launch_flags())

    def close(self) -> None:
        self._close_front()
        self.store.close()
