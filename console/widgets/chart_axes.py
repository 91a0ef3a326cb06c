"""Axis ticks that do not exaggerate noise: round steps, a zero baseline where asked, short SI labels.

Why our own ticks rather than plotext's: plotext spreads ticks evenly over the data's own range, so 12.1 to
12.3 tok/s fills the chart top to bottom and its labels read `34580.0` or `3.458e+04`. Here a tick is a round
number (1, 2, 2.5 or 5 times a power of ten), the range can be held to zero (a count, a rate, a duration), and
a label is at most a few characters with an SI prefix (`34.6k`, `1.2M`, `4m`). Pure: numbers in, text out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

NICE = (1.0, 2.0, 2.5, 5.0, 10.0)
LARGE = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
SMALL = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
PLAIN_FROM = 0.01  # an axis whose largest tick is 0.01 to 999 is labelled without a prefix (0.25, 0.010, 120)


@dataclass(frozen=True)
class Ticks:
    """Where an axis' ticks are, their labels, and the axis' limits (the data's range, zero included where
    asked: no band of empty chart above the data)."""

    values: tuple[float, ...]
    labels: tuple[str, ...]
    limits: tuple[float, float]


def nice_step(raw: float, integer: bool = False) -> float:
    """The round step (1, 2, 2.5, 5 x 10^k; no 2.5 on an integer axis, and at least 1) nearest `raw`."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    factors = (1.0, 2.0, 5.0, 10.0) if integer else NICE
    step = min((f * power for f in factors), key=lambda s: abs(math.log(s / raw)))
    return max(step, 1.0) if integer else step


def _span(lo: float, hi: float, zero: bool) -> tuple[float, float]:
    """A range with room: a flat line (lo == hi) gets a band around it (above zero on a zero-based axis)."""
    if hi > lo:
        return lo, hi
    pad = abs(lo) * 0.1 or 1.0
    return (lo, hi + pad) if zero and lo == 0 else (lo - pad, hi + pad)


def ticks(values: Sequence[float], count: int, *, zero: bool = False, integer: bool = False) -> Ticks:
    """About `count` round ticks covering `values` (and 0 when `zero`), labelled short."""
    lo, hi = min(values), max(values)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    lo, hi = _span(lo, hi, zero)
    raw = (hi - lo) / max(1, count - 1)
    marks, step = _marks(lo, hi, nice_step(raw, integer))
    if len(marks) < 2:  # the nearest round step was wider than the range: the next one down
        marks, step = _marks(lo, hi, nice_step(raw / 2, integer))
    return Ticks(marks or (_clean(lo),), labels(marks or (lo,), step), (lo, hi))


def _marks(lo: float, hi: float, step: float) -> tuple[tuple[float, ...], float]:
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return tuple(_clean(i * step) for i in range(first, last + 1)), step


def _clean(value: float) -> float:
    """A tick without float noise (0.30000000000000004 -> 0.3, -0.0 -> 0.0)."""
    return float(f"{value:.12g}") + 0.0


def scale(top: float) -> tuple[float, str]:
    """The SI factor and prefix an axis whose largest |tick| is `top` is labelled in."""
    for factor, prefix in LARGE:
        if top >= factor:
            return factor, prefix
    if top >= PLAIN_FROM or top == 0:
        return 1.0, ""
    for factor, prefix in SMALL:
        if top >= factor:
            return factor, prefix
    return SMALL[-1]


def labels(marks: Sequence[float], step: float) -> tuple[str, ...]:
    """Each tick as short text: one SI prefix for the whole axis, as many decimals as the step needs."""
    factor, prefix = scale(max(abs(m) for m in marks))
    return tuple(_label(m / factor, decimals(step / factor), prefix) for m in marks)


def decimals(step: float) -> int:
    """The decimals that tell ticks `step` apart (2.5 -> 1, 0.2 -> 1, 0.05 -> 2, 10 -> 0), at most 3."""
    for places in range(4):
        shifted = step * 10**places
        if math.isclose(shifted, round(shifted), rel_tol=1e-6) and round(shifted) > 0:
            return places
    return 3


def _label(value: float, places: int, prefix: str) -> str:
    return "0" if value == 0 else f"{value:.{places}f}{prefix}"
