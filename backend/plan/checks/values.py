"""How a fix names values: divisors, the legal values nearest the current one, and "a, b or c"."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=512)
def divisors(n: int) -> tuple[int, ...]:
    """Every divisor of n, ascending, from its prime factors: trial division to sqrt(n), not a loop to n
    (the spec caps its numbers, so sqrt(n) stays in the thousands)."""
    if n <= 0:
        return ()
    out = [1]
    rest, p = n, 2
    while p * p <= rest:
        if rest % p == 0:
            power, powers = 1, []
            while rest % p == 0:
                rest //= p
                power *= p
                powers.append(power)
            out += [d * q for d in out for q in powers]
        p += 1 if p == 2 else 2
    if rest > 1:
        out += [d * rest for d in out]
    return tuple(sorted(out))


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
