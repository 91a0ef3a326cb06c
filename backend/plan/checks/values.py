"""How a fix names values: divisors, the legal values nearest the current one, and "a, b or c"."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=512)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0) if n > 0 else ()


def near(values: Iterable[int], current: int, k: int = 4) -> list[int]:
    """Up to k legal values closest to the current one (ascending)."""
    return sorted(sorted(set(values), key=lambda v: (abs(v - current), v))[:k])


def alts(values: Iterable[object]) -> str:
    vals = [str(v) for v in values]
    if not vals:
        return "(none)"
    return vals[0] if len(vals) == 1 else ", ".join(vals[:-1]) + " or " + vals[-1]


def gb(x: float) -> str:
    return f"{x:.1f} GB"
