"""The Run view's charts as one board, drawn from configs/charts.toml: one run's series, or a comparison.

Why one widget for both: the single run's charts and a comparison's were two lists that disagreed, and the
comparison reached into the view to retitle its charts and put them back. Here every chart comes from its
spec (backend.signals.chart_specs): one run's lines are the spec's series; a comparison's are every run's
line of the spec's compared metric (the other runs first, the view's own run last, in its own colour). The
rollout cursor marks each chart on its own axis. Under 100 columns a comparison's charts take two rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Container

from backend.signals.chart_specs import ChartsConfig, ChartSpec, axis_word, load_charts
from backend.signals.series import ROLLOUT_AXIS, axis_for
from backend.signals.sources import chart_source
from console.widgets.charts import ChartFrame, ChartSeries, LineChart

if TYPE_CHECKING:
    from backend.signals.compare import Comparison, MetricOverlay
    from backend.signals.monitor import MetricsSnapshot
    from backend.signals.replay import RolloutMark

FIRST_COLOUR = "cyan"  # the view's own run (the live one): drawn last, over the others
OTHER_COLOURS = ("orange", "magenta", "green", "yellow", "blue", "white")


def colours(count: int) -> list[str]:
    """A colour per run, the first run's first."""
    return [FIRST_COLOUR] + [OTHER_COLOURS[i % len(OTHER_COLOURS)] for i in range(count - 1)]


def run_series(spec: ChartSpec, metrics: MetricsSnapshot | None) -> list[ChartSeries]:
    """One run's lines of a chart: each series' finite (step, value) points."""
    return [ChartSeries(s.label, _points(metrics, s.key), s.color, s.right) for s in spec.series]


def _points(metrics: MetricsSnapshot | None, key: str) -> tuple[tuple[float, float], ...]:
    series = metrics.series.get(key) if metrics is not None else None
    return series.finite_points() if series is not None else ()


def run_frame(spec: ChartSpec, source: str, note: str) -> ChartFrame:
    """One run's chart: its title (with the data's source), its axes, zero where its kinds start there."""
    return ChartFrame(
        f"{spec.title} · from {source}" if source else spec.title,
        spec.x_label,
        spec.y,
        spec.right,
        (spec.zero_based(False), spec.zero_based(True)),
        note=note,
    )


def overlay_series(overlay: MetricOverlay) -> list[ChartSeries]:
    """A comparison's lines: the other runs in order, then the first run (drawn on top)."""
    palette = colours(len(overlay.lines))
    drawn = [ChartSeries(line.label, line.points, palette[i]) for i, line in enumerate(overlay.lines)]
    return drawn[1:] + drawn[:1]


def overlay_frame(overlay: MetricOverlay) -> ChartFrame:
    metric = overlay.metric
    return ChartFrame(metric.title, axis_word(metric.axis), zero=(metric.zero, False))


def cursor_x(axis: str, mark: RolloutMark) -> float | None:
    """Where the rollout cursor is on an axis: the rollout itself, or the rollout's first optimizer step
    (None before the rollout has one)."""
    if axis == ROLLOUT_AXIS:
        return float(mark.n)
    return float(mark.first_step) if mark.first_step is not None else None


class ChartBoard(Container):
    """The charts of configs/charts.toml side by side (two rows for a comparison under 100 columns)."""

    DEFAULT_CSS = """
    ChartBoard { layout: horizontal; height: 1fr; }
    ChartBoard.compact { layout: grid; grid-size: 2; grid-gutter: 0 1; }
    ChartBoard LineChart { width: 1fr; margin-right: 1; }
    ChartBoard.compact LineChart { margin-right: 0; }
    """

    def __init__(self, charts: ChartsConfig | None = None, *, id: str | None = "run-charts") -> None:
        super().__init__(id=id)
        self.charts = charts or load_charts()
        self.mark: RolloutMark | None = None
        self._axes: dict[str, str] = {}  # each chart's x axis as drawn now (a comparison's may differ)

    def compose(self) -> ComposeResult:
        for spec in self.charts.run_charts:
            self._axes[spec.id] = axis_for(spec.series[0].key)
            yield LineChart(run_frame(spec, "", "waiting for metrics"), id=f"chart-{spec.id}")

    def chart(self, chart_id: str) -> LineChart:
        return self.query_one(f"#chart-{chart_id}", LineChart)

    def draw_run(self, metrics: MetricsSnapshot | None, note: str) -> None:
        """One run's charts (a comparison's own charts go)."""
        self.set_class(False, "compact")
        sources = metrics.sources if metrics is not None else {}
        for chart in self.query(LineChart):
            if self._spec(chart).compared_only:
                chart.remove()
        for spec in self.charts.run_charts:
            self._axes[spec.id] = axis_for(spec.series[0].key)
            source = chart_source(sources, spec.keys) if sources else ""
            self._draw(spec.id, run_frame(spec, source, note), run_series(spec, metrics))

    def draw_comparison(self, comparison: Comparison, compact: bool) -> None:
        """Every compared metric in its chart, every run's line on the metric's own step axis."""
        self.set_class(compact, "compact")
        for overlay in comparison.overlays:
            chart_id = overlay.metric.chart
            self._axes[chart_id] = overlay.metric.axis
            self._draw(chart_id, overlay_frame(overlay), overlay_series(overlay))

    def set_mark(self, mark: RolloutMark) -> None:
        """The rollout cursor, on every chart's own axis."""
        self.mark = mark
        for chart in self.query(LineChart):
            chart.set_marker(cursor_x(self._axes[self._spec(chart).id], mark))

    def _draw(self, chart_id: str, frame: ChartFrame, series: list[ChartSeries]) -> None:
        chart = self._ensure(chart_id)
        x = cursor_x(self._axes[chart_id], self.mark) if self.mark is not None else None
        chart.set_frame(frame if x is None else replace(frame, marker=x))
        chart.set_series(series)

    def _ensure(self, chart_id: str) -> LineChart:
        """The chart of `chart_id`, mounted where the TOML puts it when only a comparison draws it."""
        found = self.query(f"#chart-{chart_id}")
        if found:
            return found.first(LineChart)
        chart = LineChart(ChartFrame(self.charts.spec(chart_id).title), id=f"chart-{chart_id}")
        ids = [c.id for c in self.charts.chart]
        earlier = {f"chart-{i}" for i in ids[: ids.index(chart_id)]}
        mounted = [c for c in self.query(LineChart) if c.id in earlier]
        if mounted:
            self.mount(chart, after=mounted[-1])
        else:
            self.mount(chart, before=0) if self.children else self.mount(chart)
        return chart

    def _spec(self, chart: LineChart) -> ChartSpec:
        return self.charts.spec((chart.id or "").removeprefix("chart-"))
