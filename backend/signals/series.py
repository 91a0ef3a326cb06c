"""One metric over miles' own step axis, with bounded memory for runs of any length.

wandb plots `train/*` against `train/step`, `eval/*` against `eval/step` and everything else against
`rollout/step`; we keep the same axes so a chart here reads like the operator's wandb. A series holds at most
`max_points`; past that the oldest part is thinned bucket by bucket, keeping each bucket's extremes (and
any non-finite point), because spikes and collapses are what an operator looks for in old history.

A point is identified by its step: a second report of the same step (miles prints `step N` twice; the same
dict also arrives through the event log) replaces the first only if its source ranks at least as high and
it is not older, so nothing is ever counted twice.

A worker thread appends while the UI draws, so the UI never sees a `Series`: `SeriesSet.snapshot()` copies
every series into frozen tuples under the set's lock (a series that did not change since the last snapshot
is not copied again).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

TRAIN_AXIS, ROLLOUT_AXIS, EVAL_AXIS = "train/step", "rollout/step", "eval/step"
AXES = (TRAIN_AXIS, ROLLOUT_AXIS, EVAL_AXIS)
STEP_KEYS = frozenset(AXES)


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
    version: int = 0  # bumped on every change, so an unchanged series is not copied again

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: float, value: float, ts: float = math.nan, priority: int = 0) -> bool:
        """Insert or replace the point at `step`; True if the series changed."""
        steps = self.steps
        if not steps or step > steps[-1]:  # the usual case: a new newest step
            steps.append(step)
            self.values.append(value)
            self.ts.append(ts)
            self.rank.append(priority)
        else:
            i = bisect.bisect_left(steps, step)
            if i < len(steps) and steps[i] == step:
                old_rank, old_ts = self.rank[i], self.ts[i]
                if priority < old_rank or (priority == old_rank and ts < old_ts):
                    return False
                same = self.values[i] == value or (math.isnan(value) and math.isnan(self.values[i]))
                self.values[i], self.ts[i], self.rank[i] = value, ts, priority
                self.version += 1
                return not same
            steps.insert(i, step)
            self.values.insert(i, value)
            self.ts.insert(i, ts)
            self.rank.insert(i, priority)
        if len(steps) > self.max_points:
            self._thin()
        self.version += 1
        return True

    def _thin(self, bucket: int = 4) -> None:
        """Halve the oldest three quarters: each bucket of
        `bucket` points keeps its min, max and non-finites."""
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

    def freeze(self) -> SeriesSnapshot:
        return SeriesSnapshot(self.key, self.axis, tuple(self.steps), tuple(self.values), self.thinned)


def _num(step: float) -> float | int:
    return int(step) if float(step).is_integer() else step


@dataclass(frozen=True, slots=True)
class SeriesSnapshot:
    """One series as of one moment: tuples nobody changes."""

    key: str
    axis: str
    steps: tuple[float, ...]
    values: tuple[float, ...]
    thinned: int = 0

    def __len__(self) -> int:
        return len(self.steps)

    def points(self) -> tuple[tuple[float | int, float | None], ...]:
        """`((step, value), ...)` with non-finite values as None (JSON-ready once listed)."""
        return tuple((_num(s), finite_or_none(v)) for s, v in zip(self.steps, self.values, strict=True))

    def finite_points(self) -> tuple[tuple[float, float], ...]:
        """The points a chart draws: finite values only."""
        return tuple((s, v) for s, v in zip(self.steps, self.values, strict=True) if math.isfinite(v))

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None


@dataclass(frozen=True)
class SeriesSetSnapshot:
    """Every series of a run as of one moment (read-only mapping key -> SeriesSnapshot)."""

    by_key: Mapping[str, SeriesSnapshot]

    def get(self, key: str) -> SeriesSnapshot | None:
        return self.by_key.get(key)

    def keys(self) -> list[str]:
        return sorted(self.by_key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def latest(self, key: str) -> float | None:
        series = self.by_key.get(key)
        return series.last if series is not None else None


MAX_SERIES = 2000  # metric keys per run; miles logs ~150, a log inventing keys per line must not grow forever


class SeriesSet:
    """All series of a run, created on first point, at most `max_series` of them: a point of a key past the
    cap is dropped and counted (`dropped_keys`, a few named in `dropped_sample`), and says so as a blind spot.
    One writer thread adds; any thread may snapshot."""

    def __init__(self, max_points: int = 4096, max_series: int = MAX_SERIES) -> None:
        self.max_points = max_points
        self.max_series = max_series
        self.dropped_keys = 0  # distinct keys refused (counted once each while few; see _note_dropped)
        self.dropped_sample: list[str] = []
        self._dropped_seen: set[str] = set()
        self.by_key: dict[str, Series] = {}
        self._lock = threading.Lock()
        self._frozen: dict[str, tuple[int, SeriesSnapshot]] = {}  # key -> (version, its last snapshot)

    def add(self, key: str, step: float, value: float, ts: float = math.nan, priority: int = 0) -> bool:
        with self._lock:
            series = self.by_key.get(key)
            if series is None:
                if len(self.by_key) >= self.max_series:
                    self._note_dropped(key)
                    return False
                series = self.by_key[key] = Series(key, axis_for(key), self.max_points)
            return series.add(step, value, ts, priority)

    def add_record(
        self, values: Mapping[str, float], n: float, ts: float, priority: int
    ) -> tuple[list[str], int]:
        """Every point of one metric record under one lock: each key (but the step keys) at its axis' step
        in `values`, else `n`. Returns the keys whose series changed, in order, and how many points were
        dropped for a non-finite step."""
        steps = {axis: values.get(axis, n) for axis in AXES}
        changed: list[str] = []
        bad = 0
        by_key = self.by_key
        with self._lock:
            for key, value in values.items():
                if key in STEP_KEYS:
                    continue
                series = by_key.get(key)
                axis = series.axis if series is not None else axis_for(key)
                step = steps[axis]
                if not math.isfinite(step):  # a NaN/Infinity step (a dump's `"train/step": Infinity`)
                    bad += 1
                    continue
                if series is None:
                    if len(by_key) >= self.max_series:
                        self._note_dropped(key)
                        continue
                    series = by_key[key] = Series(key, axis, self.max_points)
                if series.add(step, value, ts, priority):
                    changed.append(key)
        return changed, bad

    def admits(self, key: str) -> bool:
        """Whether a point of `key` would be kept (an existing series, or room for a new one)."""
        return key in self.by_key or len(self.by_key) < self.max_series

    def _note_dropped(self, key: str) -> None:
        """Count a refused key once; past a bounded memory of names, every refusal counts (an upper bound)."""
        if key in self._dropped_seen:
            return
        if len(self._dropped_seen) < 4 * self.max_series:
            self._dropped_seen.add(key)
        self.dropped_keys += 1
        if len(self.dropped_sample) < 5:
            self.dropped_sample.append(key)

    def snapshot(self) -> SeriesSetSnapshot:
        """Frozen copies of every series, taken under the lock (so no half-added point is seen)."""
        out: dict[str, SeriesSnapshot] = {}
        with self._lock:
            for key, series in self.by_key.items():
                cached = self._frozen.get(key)
                if cached is None or cached[0] != series.version:
                    cached = self._frozen[key] = (series.version, series.freeze())
                out[key] = cached[1]
        return SeriesSetSnapshot(MappingProxyType(out))

    def get(self, key: str) -> Series | None:
        return self.by_key.get(key)

    def latest(self, key: str) -> float | None:
        series = self.by_key.get(key)
        return series.values[-1] if series and series.values else None

    def keys(self) -> list[str]:
        return sorted(self.by_key)
