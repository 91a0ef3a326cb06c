"""miles' log line format (logging_utils.py): `[YYYY-mm-dd HH:MM:SS.mmm <name>] <file>:<line> - msg`.

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

_FORMAT = "[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - %(message)s"


class MilesLog:
    """One process's miles-style logger (miles configures it once per process)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger = logging.getLogger(f"simtrainer.{name}")
        self._logger.setLevel(logging.INFO)
        self._logger.propagate = False
        if not self._logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(_FORMAT.format(name=name), datefmt="%Y-%m-%d %H:%M:%S"))
            self._logger.addHandler(handler)

    def at(self, where: str, message: str) -> None:
        """Log `message` as if printed at miles' `where` ("file.py:123")."""
        filename, _, lineno = where.partition(":")
        record = logging.LogRecord(self._logger.name, logging.INFO, f"/sim/miles/{filename}",
                                   int(lineno or 0), message, None, None)
        self._logger.handle(record)
        for handler in self._logger.handlers:
            handler.flush()


class EventLog:
    """miles' EventLogger with `--dump-details`: one MetricEvent JSON line per `tracking.log()`
    call in `{dump_details}/events/<name>.jsonl` (miles-run-output.md §3.7). NaN/Inf become
    null (pydantic's default), numpy scalars plain numbers."""

    def __init__(self, dump_details: str | None, name: str, source: dict[str, object]) -> None:
        self.path = Path(dump_details) / "events" / f"{name}.jsonl" if dump_details else None
        self.source = source
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def metric(self, metrics: dict[str, object], rollout_id: int | None = None) -> None:
        if self.path is None:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else
                     float(v) if isinstance(v, float) else v) for k, v in metrics.items()}
        record = {"timestamp": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                  "source": self.source, "type": "metric", "rollout_id": rollout_id, "attempt": None,
                  "metrics": clean}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
