"""One metric over miles' own step axis, with bounded memory for runs of any length.

wandb plots `train/*` against `train/step`, `eval/*` against `eval/step` and everything else against
`rollout/step`; we keep the same axes so a chart here reads like the operator's wandb. A series holds at most
`max_points`; past that the oldest part is thinned bucket by bucket, keeping each bucket's extremes (and
any non-finite point), because spikes and collapses are what an operator looks for in old history.

A point is identified by its step: a second report of the same step (miles prints `step N` twice; the same
dict also arrives through the event log) replaces the first only if its source ranks at least as high and
it is not older, so nothing is ever counted twice.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

TRAIN_AXIS, ROLLOUT_AXIS, EVAL_AXIS = "train/step", "rollout/step", "eval/step"
STEP_KEYS = frozenset({TRAIN_AXIS, ROLLOUT_AXIS, EVAL_AXIS})


def axis_for(key: str) -> str:
    """The step axis miles' wandb setup uses for a metric key."""
    if key.startswith(("train/", "critic-train/", "critic/")):
        return TRAIN_AXIS
    if key.startswith("eval/"):
        return EVAL_AXIS
    return ROLLOUT_AXIS


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass
class Series:
    """Points (step, value) in step order; `ts` is miles' timestamp of each point (epoch s, or nan)."""

    key: str
    axis: str
    max_points: int = 4096
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    rank: bytearray = field(default_factory=bytearray)  # source priority per point
    thinned: int = 0  # points dropped by downsampling

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: float, value: float, ts: float = math.nan, priority: int = 0) -> bool:
        """Insert or replace the point at `step`; True if the series changed."""
        steps = self.steps
        if not steps or step > steps[-1]:
            i = len(steps)
        else:
            i = bisect.bisect_left(steps, step)
            if i < len(steps) and steps[i] == step:
                old_rank, old_ts = self.rank[i], self.ts[i]
                if priority < old_rank or (priority == old_rank and ts < old_ts):
                    return False
                same = self.values[i] == value or (math.isnan(value) and math.isnan(self.values[i]))
                self.values[i], self.ts[i], self.rank[i] = value, ts, priority
                return not same
        steps.insert(i, step)
        self.values.insert(i, value)
        self.ts.insert(i, ts)
        self.rank.insert(i, priority)
        if len(steps) > self.max_points:
            self._thin()
        return True

    def _thin(self, bucket: int = 4) -> None:
        """Halve the oldest three quarters: each bucket of `bucket` points keeps its min, max and non-finites."""
        old = len(self.steps) - self.max_points // 4
        keep: list[int] = []
        values = self.values
        for a in range(0, old, bucket):
            idx = range(a, min(a + bucket, old))
            finite = [j for j in idx if math.isfinite(values[j])]
            chosen = {j for j in idx if not math.isfinite(values[j])}
            if finite:
                chosen.add(min(finite, key=values.__getitem__))
                chosen.add(max(finite, key=values.__getitem__))
            keep.extend(sorted(chosen))
        keep.extend(range(old, len(self.steps)))
        self.thinned += len(self.steps) - len(keep)
        self.steps = [self.steps[j] for j in keep]
        self.values = [values[j] for j in keep]
        self.ts = [self.ts[j] for j in keep]
        self.rank = bytearray(self.rank[j] for j in keep)

    @property
    def last(self) -> tuple[float, float] | None:
        return (self.steps[-1], self.values[-1]) if self.steps else None

    def tail(self, n: int) -> list[float]:
        return self.values[-n:]

    def points(self) -> list[list[float | None]]:
        """JSON-ready `[[step, value], ...]` with non-finite values as None."""
        return [[_num(s), finite_or_none(v)] for s, v in zip(self.steps, self.values, strict=True)]


def _num(step: float) -> float | int:
    return int(step) if float(step).is_integer() else step


class SeriesSet:
    """All series of a run, created on first point."""

    def __init__(self, max_points: int = 4096) -> None:
        self.max_points = max_points
        self.by_key: dict[str, Series] = {}

    def add(self, key: str, step: float, value: float, ts: float = math.nan, priority: int = 0) -> bool:
        series = self.by_key.get(key)
        if series is None:
            series = self.by_key[key] = Series(key, axis_for(key), self.max_points)
        return series.add(step, value, ts, priority)

    def get(self, key: str) -> Series | None:
        return self.by_key.get(key)

    def latest(self, key: str) -> float | None:
        series = self.by_key.get(key)
        return series.values[-1] if series and series.values else None

    def keys(self) -> list[str]:
        return sorted(self.by_key)
