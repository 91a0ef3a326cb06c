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
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
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


@dataclass(slots=True)
class PointRun:
    """One batch's points of one series, in the batch's order (backend.signals.metrics adds a chunk's
    records this way: a series and its rules are handled once per chunk, not once per record). `start`:
    where they landed in the series when appended in one go (-1: added one by one)."""

    series: Series
    values: list[float] = field(default_factory=list)
    records: list[int] = field(default_factory=list)  # each point's record: its place in the batch
    steps: list[float] = field(default_factory=list)  # each point's step, ts and source rank: the records'
    ts: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    start: int = -1


def _batch_order(run: PointRun | None) -> None:
    """A run gathered from several dict shapes put back in its records' order."""
    if run is not None:
        order = sorted(range(len(run.records)), key=run.records.__getitem__)
        run.records = list(map(run.records.__getitem__, order))
        run.values = list(map(run.values.__getitem__, order))


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

    def extend(self, run: PointRun) -> bool:
        """Append a run's points in one go where point by point would only have appended them (each step
        after the last, no thinning on the way): True and `run.start` set, else False and nothing done."""
        steps, new = self.steps, run.steps
        if (steps and new[0] <= steps[-1]) or len(steps) + len(new) > self.max_points:
            return False
        if not all(map(operator.lt, new, islice(new, 1, None))):  # each step after the one before
            return False
        run.start = len(steps)
        steps.extend(new)
        self.values.extend(run.values)
        self.ts.extend(run.ts)
        self.rank.extend(run.ranks)
        self.version += len(new)
        return True

    def _thin(self, bucket: int = 4) -> None:
        """Halve the oldest three quarters: each bucket of `bucket` points keeps its min, max and
        non-finites (the points kept picked at C speed: a full series thins often)."""
        old = len(self.steps) - self.max_points // 4
        values = self.values
        keep = _kept_in(values, old, bucket)
        keep.extend(range(old, len(self.steps)))
        self.thinned += len(self.steps) - len(keep)
        self.steps = list(map(self.steps.__getitem__, keep))
        self.values = list(map(values.__getitem__, keep))
        self.ts = list(map(self.ts.__getitem__, keep))
        self.rank = bytearray(map(self.rank.__getitem__, keep))

    @property
    def last(self) -> tuple[float, float] | None:
        return (self.steps[-1], self.values[-1]) if self.steps else None

    def tail(self, n: int) -> list[float]:
        return self.values[-n:]

    def freeze(self) -> SeriesSnapshot:
        return SeriesSnapshot(self.key, self.axis, tuple(self.steps), tuple(self.values), self.thinned)


def _kept_in(values: list[float], old: int, bucket: int) -> list[int]:
    """The places in values[:old] a thinned series keeps, bucket by bucket (`_kept_of_bucket`'s): where
    the whole buckets hold only finite values (the usual case), each one's first minimum and maximum by
    zip and map at C speed, not a step per bucket."""
    whole = old - old % bucket
    head = values[:whole]
    if whole and math.isfinite(sum(head)):  # all finite (an overflowing sum only takes the long way)
        groups = list(zip(*(head[j::bucket] for j in range(bucket)), strict=True))
        starts = range(0, whole, bucket)
        lows = map(operator.add, starts, map(tuple.index, groups, map(min, groups)))
        highs = map(operator.add, starts, map(tuple.index, groups, map(max, groups)))
        keep = sorted({*lows, *highs})  # buckets are disjoint: their places sort into bucket order
    else:
        keep = [j for a in range(0, whole, bucket) for j in _kept_of_bucket(values, a, a + bucket)]
    if whole < old:
        keep.extend(_kept_of_bucket(values, whole, old))
    return keep


def _kept_of_bucket(values: list[float], a: int, b: int) -> list[int]:
    """The places in values[a:b] a thinned series keeps, in order: the first minimum and maximum of the
    finite values, and every non-finite one."""
    part = values[a:b]
    if math.isfinite(sum(part)):  # all finite (an overflowing sum only takes the long way)
        low, high = a + part.index(min(part)), a + part.index(max(part))
        return [low] if low == high else sorted((low, high))
    idx = range(a, b)
    finite = [j for j in idx if math.isfinite(values[j])]
    chosen = {j for j in idx if not math.isfinite(values[j])}
    if finite:
        chosen.add(min(finite, key=values.__getitem__))
        chosen.add(max(finite, key=values.__getitem__))
    return sorted(chosen)


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

    def group(
        self, values: Mapping[str, float], n: float, index: int, runs: dict[str, PointRun | None]
    ) -> int:
        """One metric record's points added to `runs` (a batch's points, by key, in order; applied by
        `apply`), each point as its value and `index`, its record's place in the batch: its step is the
        record's on the key's axis (the axis' key in `values`, else `n`). A new key's series is made here,
        in the batch's order, so the series cap admits the same keys as point by point (a step key maps to
        None). Returns how many points were dropped for a non-finite step."""
        if not all(math.isfinite(values.get(axis, n)) for axis in AXES):
            return self._group_checked(values, n, index, runs)
        with self._lock:
            for key, value in values.items():
                run = runs.get(key)
                if run is None and key not in runs:
                    run = self._start(key, runs)
                if run is not None:
                    run.values.append(value)
                    run.records.append(index)
        return 0

    def group_batch(self, rows: Sequence[Mapping[str, float]]) -> dict[str, PointRun | None] | None:
        """A batch's points by key as `group` record by record gives them (`rows`: the records' values, in
        the batch's order), dict shape by dict shape: miles repeats a few shapes, and a shape's columns come
        out of one zip at C speed instead of a step per key per record. None where a point needs more than
        its series' run (a key without a series yet, so the series cap; a non-finite step): the caller
        groups record by record then. Nothing is changed here."""
        shapes: dict[tuple[str, ...], list[int]] = {}
        for i, values in enumerate(rows):
            shapes.setdefault(tuple(values), []).append(i)
        runs: dict[str, PointRun | None] = {}
        merged: set[str] = set()  # keys of more than one shape: their points to put back in batch order
        for shape, index in shapes.items():
            columns = zip(*(rows[i].values() for i in index), strict=True)
            if not self._add_shape(shape, index, columns, runs, merged):
                return None
        for key in merged:
            _batch_order(runs[key])
        return runs

    def _add_shape(
        self,
        shape: tuple[str, ...],
        index: list[int],
        columns: Iterator[tuple[float, ...]],
        runs: dict[str, PointRun | None],
        merged: set[str],
    ) -> bool:
        """One dict shape's columns onto the runs (`group_batch`); False where it cannot."""
        by_key = self.by_key
        for key, column in zip(shape, columns, strict=True):
            if key in STEP_KEYS:
                if not all(map(math.isfinite, column)):
                    return False
                runs[key] = None
                continue
            run = runs.get(key)
            if run is not None:
                run.values.extend(column)
                run.records = run.records + index  # a new list: a shape's index is shared by its runs
                merged.add(key)
            elif (series := by_key.get(key)) is not None:
                runs[key] = PointRun(series, list(column), index)  # one index per shape: picked once
            else:
                return False
        return True

    def _group_checked(
        self, values: Mapping[str, float], n: float, index: int, runs: dict[str, PointRun | None]
    ) -> int:
        """`group` for a record with a NaN/Infinity step (a dump's `"train/step": Infinity`): its points on
        that axis are dropped, counted."""
        bad = 0
        with self._lock:
            for key, value in values.items():
                run = runs.get(key)
                if key in STEP_KEYS:
                    continue
                series = run.series if run is not None else self.by_key.get(key)
                if not math.isfinite(values.get(series.axis if series is not None else axis_for(key), n)):
                    bad += 1
                    continue
                run = run if run is not None else self._start(key, runs)
                if run is not None:
                    run.values.append(value)
                    run.records.append(index)
        return bad

    def _start(self, key: str, runs: dict[str, PointRun | None]) -> PointRun | None:
        """A key's run in a batch: None for a step key (remembered) and for a key past the cap (counted,
        not remembered: each of its points is refused as it comes)."""
        if key in STEP_KEYS:
            runs[key] = None
            return None
        series = self.by_key.get(key)
        if series is None:
            series = self._new(key)
            if series is None:
                return None
        run = runs[key] = PointRun(series)
        return run

    def _new(self, key: str) -> Series | None:
        """A new key's series, or None past the cap (counted)."""
        if len(self.by_key) >= self.max_series:
            self._note_dropped(key)
            return None
        series = self.by_key[key] = Series(key, axis_for(key), self.max_points)
        return series

    def apply(self, run: PointRun, changed: Callable[[int], None] | None = None) -> int:
        """A run's points into its series under the lock (`run.steps`, `run.ts`, `run.ranks` filled in): in
        one extend when they all come after its newest step (`run.start` says where they landed), else one
        by one, `changed(i)` right after point `i` changed the series. Returns how many points changed it."""
        with self._lock:
            if run.series.extend(run):
                return len(run.steps)
            add, count = run.series.add, 0
            for i, point in enumerate(zip(run.steps, run.values, run.ts, run.ranks, strict=True)):
                if add(*point):
                    count += 1
                    if changed is not None:
                        changed(i)
            return count

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
