"""miles' structured outputs of a live run (`{dump_details}/events/*.jsonl`, `dashboard/` streams) as a source
of the run's charts, first before the log text.

Why: the driver runs on the head, so the console can read the files the run writes while it is live: the same
metric dicts as the log's lines, with no text parsing, whatever the log's shape. They go into the same
RunMonitor as the log, whose series keep one point per step and let a higher-ranked source replace a lower
one (events > dashboard > log), so the log is the fallback for what the files do not (yet) hold, and a
chart names the source of what it draws.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from backend.signals.monitor import RunMonitor

DUMP_FLAG = "--dump-details"


def dump_dir_of(entrypoint: str) -> str | None:
    """The `--dump-details` directory of a miles entrypoint (`--dump-details X` or `--dump-details=X`)."""
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return None
    for i, arg in enumerate(argv):
        if arg == DUMP_FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(DUMP_FLAG + "="):
            return arg.split("=", 1)[1] or None
    return None


@dataclass(frozen=True)
class StructuredState:
    """What the structured feed knows, for the screen: where
    it reads, whether that exists yet, what it read."""

    path: str | None
    present: bool
    records: int
    bad_lines: int
    repeated_lines: int
    swaps: int


class StructuredFeed:
    """Polls one run's dump directory into its monitor; the directory may appear only after the run starts."""

    def __init__(self, monitor: RunMonitor, dump_dir: str | None) -> None:
        self.monitor = monitor
        self.path = dump_dir
        self.records = 0
        if dump_dir is not None:
            monitor.attach_dump(dump_dir, wait=True)

    def poll(self) -> int:
        """Read what the files gained into the monitor; returns
        the metric records read (I/O: call off the UI)."""
        if self.path is None:
            return 0
        got = self.monitor.poll_dump()
        self.records += got
        return got

    def state(self) -> StructuredState:
        dump = self.monitor.dump
        if self.path is None or dump is None:
            return StructuredState(self.path, False, 0, 0, 0, 0)
        return StructuredState(
            self.path, dump.present, self.records, dump.bad_lines, dump.repeated_lines, dump.swaps
        )
