"""What a run's log has been doing, for the blind-spot alerts: how long it has logged, how many lines, and
how long it has printed only health-check noise (a hang looks like that: SGLang answering `GET /health`
while nothing else moves).

Kept per chunk with str.count (C speed), never per line: a chunk whose lines are all noise extends the
quiet spell; any other chunk ends it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from backend.signals.grammar import STAMP
from backend.signals.metrics import parse_ts

if TYPE_CHECKING:
    from backend.signals.prefilter import Scan


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

    def note(self, text: str, scan: Scan | None = None) -> None:
        """A chunk of sanitised complete lines; `scan`: the monitor's, which found the noise needles."""
        breaks = scan.numbers.total if scan is not None else text.count("\n")  # counted once, shared
        count = breaks + (0 if text.endswith("\n") else 1)
        if count <= 0 or not text:
            return
        now = self._clock()
        self._note_start(text, now)
        self.lines += count
        last = _last_line(text)
        self.last_line = last
        noisy = sum(_count(text, needle, scan) for needle in self.noise) if self.noise else 0
        if noisy >= count:
            self.noise_lines += count
            self.noise_sample = last
        else:
            self.noise_lines = 0
            self.active_at = now

    def _note_start(self, text: str, now: float) -> None:
        """When the log began: the first chunk's arrival, and the oldest bracket stamp."""
        if math.isnan(self.first_seen):
            self.first_seen = now
        if math.isnan(self.first_ts):
            stamp = STAMP.search(text[:8192])
            if stamp is not None:
                self.first_ts = parse_ts(stamp.group(1))

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


def _last_line(text: str) -> str:
    """The text's last non-empty line, without a copy of the chunk (rstrip/rsplit made two)."""
    end = len(text)
    while end and text[end - 1] == "\n":
        end -= 1
    return text[text.rfind("\n", 0, end) + 1 : end]


def _count(text: str, needle: str, scan: Scan | None) -> int:
    """`text.count(needle)` (non-overlapping), from the scan's starts where there is one."""
    if scan is None:
        return text.count(needle)
    count, end = 0, -1
    for start in scan.at.get(needle, ()):
        if start >= end:
            count, end = count + 1, start + len(needle)
    return count
