"""What a run's log has been doing, for the blind-spot alerts: how long it has logged, how many lines, and
how long it has printed only health-check noise (a hang looks like that: SGLang answering `GET /health`
while nothing else moves).

Kept per chunk with str.count (C speed), never per line: a chunk whose lines are all noise extends the
quiet spell; any other chunk ends it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from backend.signals.grammar import STAMP
from backend.signals.metrics import parse_ts


class LogActivity:
    """Line count, first stamp and the current noise-only spell of one run's log."""

    def __init__(self, noise: Sequence[str], clock: Callable[[], float]) -> None:
        self.noise = tuple(noise)
        self._clock = clock
        self.lines = 0
        self.first_ts = math.nan  # the oldest bracket stamp (miles' clock)
        self.first_seen = math.nan  # when the first line arrived (wall clock)
        self.last_line = ""
        self.noise_lines = 0  # lines of noise since the last real line
        self.noise_sample = ""
        self.active_at = math.nan  # wall clock of the last chunk holding a real line

    def note(self, text: str) -> None:
        """A chunk of sanitised complete lines."""
        count = text.count("\n") + (0 if text.endswith("\n") else 1)
        if count <= 0 or not text:
            return
        now = self._clock()
        if math.isnan(self.first_seen):
            self.first_seen = now
        if math.isnan(self.first_ts):
            stamp = STAMP.search(text[:8192])
            if stamp is not None:
                self.first_ts = parse_ts(stamp.group(1))
        self.lines += count
        end = len(text)
        while end and text[end - 1] == "\n":
            end -= 1
        last = text[text.rfind("\n", 0, end) + 1 : end]  # no copy of the chunk (rstrip/rsplit made two)
        self.last_line = last
        noisy = sum(text.count(needle) for needle in self.noise) if self.noise else 0
        if noisy >= count:
            self.noise_lines += count
            self.noise_sample = last
        else:
            self.noise_lines = 0
            self.active_at = now

    def logged_s(self, miles_now: float) -> float:
        """How long the run has logged: by miles' stamps where it has them, else since the first line came."""
        if math.isfinite(self.first_ts) and math.isfinite(miles_now):
            return miles_now - self.first_ts
        return self._clock() - self.first_seen if math.isfinite(self.first_seen) else math.nan

    def quiet_s(self) -> float:
        """Seconds of noise only (nan if the log never had a real line or is not quiet)."""
        if self.noise_lines == 0 or math.isnan(self.active_at):
            return math.nan
        return self._clock() - self.active_at
