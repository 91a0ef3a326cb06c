"""A full series' thinning picks its kept points at C speed (backend.signals.series `_kept_in`): the same
points as the bucket-by-bucket rule it stands in for (each bucket's first minimum and maximum of its finite
values, and every non-finite one), with ties, signed zeros, infinities, NaNs and overflowing sums."""

from __future__ import annotations

import math
import random

from backend.signals.series import Series, _kept_in


def _reference(values: list[float], old: int, bucket: int = 4) -> list[int]:
    keep: list[int] = []
    for a in range(0, old, bucket):
        idx = range(a, min(a + bucket, old))
        finite = [j for j in idx if math.isfinite(values[j])]
        chosen = {j for j in idx if not math.isfinite(values[j])}
        if finite:
            chosen.add(min(finite, key=values.__getitem__))
            chosen.add(max(finite, key=values.__getitem__))
        keep.extend(sorted(chosen))
    return keep


def test_kept_points_equal_the_bucket_rule() -> None:
    rng = random.Random(4)
    for trial in range(4000):
        if trial % 2:
            pool = [0.0, -0.0, 1.0, 1.0, 2.5, -3.0, 1e308, math.nan, math.inf, -math.inf]
        else:
            pool = [rng.random() for _ in range(5)] + [0.0, -0.0, 1.0]
        values = [rng.choice(pool) for _ in range(rng.randint(0, 60))]
        old = rng.randint(0, len(values))
        assert _kept_in(values, old, 4) == _reference(values, old), (values, old)


def test_a_thinned_series_keeps_each_buckets_extremes() -> None:
    series = Series("k", "train/step", max_points=64)
    for i in range(65):
        series.add(float(i), float((i * 7) % 11) if i != 10 else math.nan)
    assert len(series) < 65 and series.thinned == 65 - len(series)
    old = 65 - 64 // 4
    values = [float((i * 7) % 11) if i != 10 else math.nan for i in range(65)]
    kept = [float(i) for i in [*_reference(values, old), *range(old, 65)]]
    assert series.steps == kept
