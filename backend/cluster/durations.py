"""How long a run has been going (or went), as the state line, the status command and the abort modal say it.

Ray reports job times in milliseconds since the epoch (backend.signals.clock converts them); everything here
is in seconds. A terminal run's duration is fixed at its end time; a live one's grows with the clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def fmt_duration(seconds: float | None) -> str:
    """`14s`, `3m05s`, `2h07m`, `1d03h`; `—` when unknown (None, negative, not finite)."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "—"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class RunTiming:
    """A run's clock: `elapsed_s` is the running time so far, or the whole duration once it ended."""

    started_at: float | None
    ended_at: float | None
    now: float

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def elapsed_s(self) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at if self.ended_at is not None else self.now) - self.started_at)

    def text(self, terminal: bool) -> str:
        """`elapsed 14s` while it runs; `ran 3m05s` once the run is terminal (a duration, not a clock)."""
        return f"{'ran' if terminal else 'elapsed'} {fmt_duration(self.elapsed_s)}"
