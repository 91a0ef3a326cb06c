"""Two (or more) runs side by side: is this run better than the one before it?

Step-aligned, as wandb and LEET overlay runs: every run's series of a metric on that metric's own step axis
(train keys on the optimizer step, the rest on the rollout), so a live run at step 12 sits over its baseline's
step 12. From the overlays: a header per run (its state, last step, throughput, and its KL and reward against
the first run's at the latest step both logged), the first step where two runs diverge beyond a threshold, and
what changed between their launches (backend.signals.launch_flags). The metrics, the header's keys and the
thresholds are data (the `compare` tables of `configs/charts.toml`). Pure: snapshots in, frozen dataclasses
out, for the app's charts and `metrics --compare --json` alike, so both show the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend.sanitize import one_line
from backend.signals.chart_specs import ZERO_BASED, ChartSpec, axis_word, load_charts
from backend.signals.launch_flags import FlagDiff, LaunchFlags, diff_flags
from backend.signals.series import TRAIN_AXIS, SeriesSetSnapshot, axis_for

Point = tuple[float, float]


@dataclass(frozen=True)
class ComparedMetric:
    """One overlaid metric: its chart, its title, and when two runs count as diverged on it."""

    key: str
    chart: str
    title: str
    abs: float = 0.0
    rel: float = 0.0
    sustain: int = 1
    zero: bool = False  # a count, rate or duration: its chart's axis starts at zero

    @property
    def axis(self) -> str:
        return axis_for(self.key)

    def beyond(self, first: float, other: float) -> bool:
        return abs(other - first) > self.abs + self.rel * abs(first)


@dataclass(frozen=True)
class CompareConfig:
    metrics: tuple[ComparedMetric, ...]
    kl: str = "train/ppo_kl"
    reward: str = "rollout/raw_reward"
    throughput: str = "perf/tokens_per_gpu_per_sec"


def load_config(path: str | Path | None = None) -> CompareConfig:
    """The compared metrics (one per chart with a `compare` table) and the header's keys, from
    configs/charts.toml (or `path`); a bad file is one ChartConfigError line."""
    charts = load_charts(path)
    return CompareConfig(
        tuple(_compared_metric(spec) for spec in charts.compared),
        charts.headline.kl,
        charts.headline.reward,
        charts.headline.throughput,
    )


def _compared_metric(spec: ChartSpec) -> ComparedMetric:
    c = spec.compare
    assert c is not None  # charts.compared holds only charts with a compare table
    zero = spec.kind_of(c.key) in ZERO_BASED
    return ComparedMetric(c.key, spec.id, c.title, c.abs, c.rel, c.sustain, zero)


@dataclass(frozen=True)
class RunSide:
    """One run to compare: its label (unique among the runs), state, series and launch flags."""

    label: str
    state: str
    series: SeriesSetSnapshot
    flags: LaunchFlags | None = None
    live: bool = False

    def points(self, key: str) -> tuple[Point, ...]:
        series = self.series.get(key)
        return series.finite_points() if series is not None else ()


@dataclass(frozen=True)
class RunLine:
    """One run's points of one metric."""

    label: str
    points: tuple[Point, ...]
    first: bool = False  # the run the others are compared with
    live: bool = False


@dataclass(frozen=True)
class Divergence:
    """The first step from which `label` stays beyond the threshold of `key` against the first run."""

    label: str
    key: str
    axis: str
    step: float
    first: float
    other: float

    def text(self) -> str:
        return f"{self.key} from {axis_word(self.axis)} {_num(self.step)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "key": self.key,
            "axis": self.axis,
            "step": _num(self.step),
            "first": _finite(self.first),
            "other": _finite(self.other),
        }


@dataclass(frozen=True)
class MetricOverlay:
    """One chart's lines (the first run first) and, per other run, where it diverged (None: never)."""

    metric: ComparedMetric
    lines: tuple[RunLine, ...]
    divergences: tuple[Divergence | None, ...]

    def value_at(self, label: str, step: float) -> float | None:
        """A run's value at `step` (the rollout cursor), None where it logged none."""
        line = next((ln for ln in self.lines if ln.label == label), None)
        return dict(line.points).get(step) if line is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.metric.key,
            "chart": self.metric.chart,
            "title": self.metric.title,
            "axis": self.metric.axis,
            "runs": [
                {"label": ln.label, "points": [[_num(s), v] for s, v in ln.points]} for ln in self.lines
            ],
            "divergence": [d.to_json() if d is not None else None for d in self.divergences],
        }


@dataclass(frozen=True)
class Delta:
    """A run's value against the first run's, at the latest step both logged."""

    step: float
    value: float
    first: float

    @property
    def diff(self) -> float:
        return self.value - self.first

    def to_json(self) -> dict[str, Any]:
        return {
            "step": _num(self.step),
            "value": _finite(self.value),
            "first": _finite(self.first),
            "diff": _finite(self.diff),
        }


@dataclass(frozen=True)
class RunHeadline:
    """The header line of one run."""

    label: str
    state: str
    first: bool
    live: bool
    last_step: float | None
    throughput: float | None
    kl: float | None
    reward: float | None
    kl_delta: Delta | None = None
    reward_delta: Delta | None = None
    divergences: tuple[Divergence, ...] = ()

    def text(self) -> str:
        parts = [
            f"{self.label} {self.state}",
            f"step {_fmt(self.last_step)}",
            f"{_fmt(self.throughput)} tok/s/GPU",
            f"KL {_fmt(self.kl)}{_delta(self.kl_delta)}",
            f"reward {_fmt(self.reward)}{_delta(self.reward_delta)}",
        ]
        if not self.first:
            parts.append(
                "diverges: " + ", ".join(d.text() for d in self.divergences)
                if self.divergences
                else "no divergence"
            )
        return "  ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "state": self.state,
            "first": self.first,
            "live": self.live,
            "last_step": _num(self.last_step) if self.last_step is not None else None,
            "throughput": _finite(self.throughput),
            "kl": _finite(self.kl),
            "reward": _finite(self.reward),
            "kl_delta": self.kl_delta.to_json() if self.kl_delta else None,
            "reward_delta": self.reward_delta.to_json() if self.reward_delta else None,
            "divergence": [d.to_json() for d in self.divergences],
        }


@dataclass(frozen=True)
class Comparison:
    """Every run's header (the first run first), one overlay per compared metric, and what changed from each
    other run to the first (None where a side's flags are unknown)."""

    runs: tuple[RunHeadline, ...]
    overlays: tuple[MetricOverlay, ...]
    changes: tuple[tuple[str, FlagDiff | None], ...] = field(default=())

    def overlay(self, chart: str) -> MetricOverlay | None:
        return next((o for o in self.overlays if o.metric.chart == chart), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [r.to_json() for r in self.runs],
            "metrics": [o.to_json() for o in self.overlays],
            "changes": [
                {"label": label, "diff": d.to_json() if d is not None else None} for label, d in self.changes
            ],
        }


def _num(step: float) -> float | int:
    return int(step) if float(step).is_integer() else step


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{_num(value)}" if float(value).is_integer() else f"{value:.4g}"


def _delta(delta: Delta | None) -> str:
    return f" (Δ {delta.diff:+.3g} at {_num(delta.step)})" if delta is not None else ""


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels made unique in order (`a.log`, `a.log (2)`), so a legend never names two runs alike."""
    out: list[str] = []
    for label in labels:
        base = one_line(label) or "run"  # a file name is text from elsewhere: no escape reaches a legend
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base} ({n})"
        out.append(name)
    return out


def divergence(
    metric: ComparedMetric, label: str, first: Sequence[Point], other: Sequence[Point]
) -> Divergence | None:
    """The first step both logged from which `other` stays beyond the threshold for `sustain` steps."""
    theirs = dict(other)
    run: list[tuple[float, float, float]] = []
    for step, a in first:
        b = theirs.get(step)
        if b is None:
            continue
        if metric.beyond(a, b):
            run.append((step, a, b))
            if len(run) >= metric.sustain:
                step0, a0, b0 = run[0]
                return Divergence(label, metric.key, metric.axis, step0, a0, b0)
        else:
            run = []
    return None


def latest_common(first: Sequence[Point], other: Sequence[Point]) -> Delta | None:
    mine = dict(first)
    for step, value in reversed(other):
        if step in mine:
            return Delta(step, value, mine[step])
    return None


def _last(side: RunSide, key: str) -> float | None:
    points = side.points(key)
    return points[-1][1] if points else None


def _last_step(side: RunSide) -> float | None:
    steps = [s.steps[-1] for s in side.series.by_key.values() if s.axis == TRAIN_AXIS and s.steps]
    return max(steps) if steps else None


def compare(sides: Sequence[RunSide], config: CompareConfig) -> Comparison:
    """Compare every run with the first one (`sides[0]`, the one being looked at)."""
    labels = unique_labels([s.label for s in sides])
    overlays = tuple(_overlay(metric, labels, sides) for metric in config.metrics)
    others = (
        _other_headline(labels[i], sides[i], sides[0], config, tuple(o.divergences[i - 1] for o in overlays))
        for i in range(1, len(sides))
    )
    heads = (_headline(labels[0], sides[0], config), *others)
    changes = tuple(
        (label, diff_flags(side.flags, sides[0].flags))
        for label, side in zip(labels[1:], sides[1:], strict=True)
    )
    return Comparison(heads, overlays, changes)


def _overlay(metric: ComparedMetric, labels: Sequence[str], sides: Sequence[RunSide]) -> MetricOverlay:
    """Every run's line of `metric` and where each other run diverged from the first."""
    lines = tuple(
        RunLine(label, side.points(metric.key), i == 0, side.live)
        for i, (label, side) in enumerate(zip(labels, sides, strict=True))
    )
    found = tuple(divergence(metric, ln.label, lines[0].points, ln.points) for ln in lines[1:])
    return MetricOverlay(metric, lines, found)


def _headline(label: str, side: RunSide, config: CompareConfig) -> RunHeadline:
    """The first run's header: its own latest numbers."""
    return RunHeadline(
        label,
        side.state,
        True,
        side.live,
        _last_step(side),
        _last(side, config.throughput),
        _last(side, config.kl),
        _last(side, config.reward),
    )


def _other_headline(
    label: str,
    side: RunSide,
    first: RunSide,
    config: CompareConfig,
    divergences: tuple[Divergence | None, ...],
) -> RunHeadline:
    """Another run's header: its latest numbers, their difference to the first run's, where it diverged."""
    own = _headline(label, side, config)
    return replace(
        own,
        first=False,
        kl_delta=latest_common(first.points(config.kl), side.points(config.kl)),
        reward_delta=latest_common(first.points(config.reward), side.points(config.reward)),
        divergences=tuple(d for d in divergences if d is not None),
    )
