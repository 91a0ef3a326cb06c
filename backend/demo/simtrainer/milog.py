"""miles' log line formats, by version (`--sim-log-format`), and its structured event log.

* `newest`:  `[YYYY-mm-dd HH:MM:SS.mmm <name>] <file>:<line> - msg` (logging_utils.py today);
* `2026-04`: `[YYYY-mm-dd HH:MM:SS] <file>:<line> - msg` (seconds, no process name: miles until mid 2026);
* `bare`:    `msg` alone, as train.py prints when it runs without Ray's prefix (or a pasted log).
No level name, local time, stderr. The `<file>:<line>` is the miles source location that prints
the line in the real trainer (e.g. `log_utils.py:542`), so parsers see what miles produces.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from backend.demo.simtrainer.dashboard import DashboardClient

EVENTS_DIR = "events"
FORMATS = {
    "newest": "[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - %(message)s",
    "2026-04": "[%(asctime)s] %(filename)s:%(lineno)d - %(message)s",
    "bare": "%(message)s",
}


class MilesLog:
    """One process's miles-style logger (miles configures it once per process): a logging.Formatter of
    miles' format, writing to stderr (or `stream`) unbuffered, so lines reach Ray as they are made."""

    def __init__(self, name: str, log_format: str = "newest", stream: TextIO | None = None) -> None:
        self.name = name
        self._formatter = logging.Formatter(
            FORMATS[log_format].format(name=name), datefmt="%Y-%m-%d %H:%M:%S"
        )
        self._stream = stream

    def at(self, where: str, message: str) -> None:
        """Log `message` as if printed at miles' `where` ("file.py:123")."""
        filename, _, lineno = where.partition(":")
        record = logging.LogRecord(
            f"miles.{self.name}",
            logging.INFO,
            f"/sim/miles/{filename}",
            int(lineno or 0),
            message,
            None,
            None,
        )
        out = self._stream or sys.stderr
        out.write(self._formatter.format(record) + "\n")
        out.flush()


class EventLog:
    """miles' EventLogger with `--dump-details`: one MetricEvent JSON line per `tracking.log()`
    call in `{dump_details}/events/<name>.jsonl` (miles-run-output.md §3.7). NaN/Inf become
    null (pydantic's default), numpy scalars plain numbers."""

    def __init__(
        self,
        dump_details: str | None,
        name: str,
        source: dict[str, object],
        dashboard: DashboardClient | None = None,
    ) -> None:
        self.path = Path(dump_details) / EVENTS_DIR / f"{name}.jsonl" if dump_details else None
        self.source = source
        self.dashboard = dashboard
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def metric(self, metrics: dict[str, object], rollout_id: int | None = None) -> None:
        """miles' `tracking.log()`: the event line, and the dashboard's metric record when that is on."""
        if self.dashboard is not None:
            self.dashboard.metrics(metrics)
        if self.path is None:
            return
        clean = {
            k: (
                None
                if isinstance(v, float) and not math.isfinite(v)
                else float(v)
                if isinstance(v, float)
                else v
            )
            for k, v in metrics.items()
        }
        record = {
            "timestamp": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
            "source": self.source,
            "type": "metric",
            "rollout_id": rollout_id,
            "attempt": None,
            "metrics": clean,
        }
        # Opened per write, as miles does, so a restore can replace the file between two events.
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
