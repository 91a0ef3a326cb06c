"""miles' log line format (logging_utils.py): `[YYYY-mm-dd HH:MM:SS.mmm <name>] <file>:<line> - msg`.

No level name, local time, stderr. The `<file>:<line>` is the miles source location that prints
the line in the real trainer (e.g. `log_utils.py:542`), so parsers see what miles produces.
"""

from __future__ import annotations

import logging
import sys

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
