"""Time units the console meets, converted in one place: Ray reports job times in epoch milliseconds,
miles stamps lines in node-local seconds, and the UI shows epoch seconds. A value's unit is known from its
source, never guessed from its size."""

from __future__ import annotations


def seconds_from_ms(ms: int | float | None) -> float | None:
    """Ray's epoch milliseconds (`start_time`, `end_time`; 0 or None while unset) as epoch seconds."""
    if ms is None or ms <= 0:
        return None
    return ms / 1000.0
