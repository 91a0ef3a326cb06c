"""The Run view's comparison: other runs overlaid on its charts, a header line per run, and what changed.

The numbers come from backend.signals.compare (the same `Comparison` `metrics --compare --json` prints); this
module only picks colours and draws: each compared metric in its chart (`#chart-<chart>`, mounted when the
single-run view has none), the other runs first and the view's own run last in its own colour, a legend with
each run's label; the rollout cursor marks the same step
on every run and the title gives each run's value there.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from rich.text import Text
from textual.css.query import NoMatches
from textual.widgets import Static

from backend.errors import ConsoleError
from backend.signals.compare import RunSide, compare, load_config
from backend.signals.series import ROLLOUT_AXIS, SeriesSetSnapshot
from console.widgets.charts import ChartSeries, LineChart

if TYPE_CHECKING:
    from backend.signals.compare import CompareConfig, Comparison, MetricOverlay
    from backend.signals.launch_flags import LaunchFlags
    from backend.signals.replay import RolloutMark
    from console.messages import BaselineAdded
    from console.views.run import RunView

FIRST_COLOUR = "cyan"  # the view's own run (the live one): drawn last, over the others
OTHER_COLOURS = ("orange", "magenta", "green", "yellow", "blue", "white")
RICH_COLOUR = {"orange": "dark_orange"}  # plotext's colour names that Rich spells differently
MAX_CHANGES_SHOWN = 6
# a chart's columns that are not its legend's text (axis ticks, frame, the line
# sample)  # flag changes listed under the headers; `metrics --compare` lists them all
LEGEND_MARGIN = 16


def colours(count: int) -> list[str]:
    """A colour per run, the first run's first."""
    return [FIRST_COLOUR] + [OTHER_COLOURS[i % len(OTHER_COLOURS)] for i in range(count - 1)]


def legend_label(label: str, room: int) -> str:
    """A label cut in the middle to `room` characters (plotext drops the whole legend when one does not fit);
    the ends stay, where run ids and file names differ."""
    if room <= 0 or len(label) <= room:
        return label
    head = (room - 1) // 2
    return label[:head] + "…" + label[len(label) - (room - 1 - head) :]


def overlay_series(overlay: MetricOverlay, width: int = 0) -> list[ChartSeries]:
    """The chart's lines: the other runs in order, then the first run (drawn on top); labels fit `width`."""
    palette = colours(len(overlay.lines))
    room = max(6, width - LEGEND_MARGIN) if width > 0 else 0
    drawn = [
        ChartSeries(legend_label(line.label, room), line.points, palette[i])
        for i, line in enumerate(overlay.lines)
    ]
    return drawn[1:] + drawn[:1]


def cursor_x(overlay: MetricOverlay, mark: RolloutMark) -> float | None:
    return float(mark.n) if overlay.metric.axis == ROLLOUT_AXIS else mark.first_step


def cursor_values(overlay: MetricOverlay, x: float | None) -> str:
    """Each run's value of the metric at the cursor (`reward at rollout 2: a 0.225 · b 0.375`), or ""."""
    if x is None:
        return ""
    values = [
        f"{ln.label} {value:.4g}"
        for ln in overlay.lines
        if (value := overlay.value_at(ln.label, x)) is not None
    ]
    where = "rollout" if overlay.metric.axis == ROLLOUT_AXIS else "step"
    return f"{overlay.metric.title} at {where} {x:g}: " + (" · ".join(values) or "no run logged it")


def panel_text(comparison: Comparison, mark: RolloutMark | None = None) -> Text:
    """A header line per run (its colour), what changed from each other run to the first, and each run's
    values at the rollout cursor."""
    text = Text()
    palette = colours(len(comparison.runs))
    for run, colour in zip(comparison.runs, palette, strict=True):
        text.append("■ ", RICH_COLOUR.get(colour, colour)).append(run.text() + "\n")
    first = comparison.runs[0].label
    for label, diff in comparison.changes:
        if diff is None:
            text.append(f"changed {label} → {first}: launch flags unknown for one of them\n", "dim")
            continue
        head = f"changed {label} → {first} ({diff.before_source} vs {diff.after_source}): "
        shown = [c.text() for c in diff.changes[:MAX_CHANGES_SHOWN]]
        more = len(diff.changes) - len(shown)
        text.append(head, "bold").append(", ".join(shown) or "no flag differs")
        if more > 0:
            text.append(f", +{more} more (metrics --compare lists all)", "dim")
        text.append("\n")
    if mark is not None:
        at = [cursor_values(o, cursor_x(o, mark)) for o in comparison.overlays]
        text.append("cursor: ", "bold").append("  |  ".join(v for v in at if v))
    text.rstrip()
    return text


class RunComparison:
    """What the Run view compares its run with, and the drawing of it."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.baselines: tuple[RunSide, ...] = ()
        self.flags: LaunchFlags | None = None
        self.state: str | None = None
        self.comparison: Comparison | None = None
        self.mark: RolloutMark | None = None
        self._config: CompareConfig | None = None
        self._drawn: tuple[object, ...] | None = None  # what the drawn comparison was computed from

    @property
    def active(self) -> bool:
        return bool(self.baselines)

    def add(self, message: BaselineAdded) -> None:
        self.baselines = (*self.baselines, message.side)
        self.flags = message.flags or self.flags
        self.state = message.state or self.state

    def _first(self) -> RunSide:
        view = self.view
        status = view.run_state
        series = view.metrics.series if view.metrics is not None else SeriesSetSnapshot(MappingProxyType({}))
        replay = view.console.replay is not None
        state = self.state if replay and self.state else (status.phase if status is not None else "—")
        return RunSide(
            status.job_id if status is not None else "this run", state, series, self.flags, live=not replay
        )

    def draw(self) -> bool:
        """Draw the comparison into the view's charts and
        header; False when there is none (single-run view)."""
        if not self.baselines:
            return False

        try:
            self._config = self._config or load_config()
        except ConsoleError as err:
            self.view.notify(str(err), severity="error")
            self.baselines = ()
            return False
        first = self._first()
        inputs = (self.view.metrics, self.baselines, first.label, first.state, self.view.size)
        drawn = self._drawn
        if drawn is not None and drawn[0] is inputs[0] and drawn[1:] == inputs[1:]:
            return True  # the view's 1 s tick: nothing the comparison reads has changed
        self._drawn = inputs
        self.comparison = comparison = compare((first, *self.baselines), self._config)
        width = self.view.query_one("#run-charts").size.width // max(1, len(comparison.overlays)) - 1
        for overlay in comparison.overlays:
            chart = self._chart(overlay)
            chart.set_labels("rollout" if overlay.metric.axis == ROLLOUT_AXIS else "step")
            chart.set_series(overlay_series(overlay, width))
            chart.set_title(overlay.metric.title)
        self._panel().update(panel_text(comparison, self.mark))
        return True

    def cursor(self, mark: RolloutMark) -> None:
        """Every compared chart marks the cursor on its own axis (the rollout, or its first step)."""
        self.mark = mark
        if self.comparison is None:
            return
        for overlay in self.comparison.overlays:
            self._chart(overlay).set_marker(cursor_x(overlay, mark))
        self._panel().update(panel_text(self.comparison, mark))

    def _chart(self, overlay: MetricOverlay) -> LineChart:
        try:
            return self.view.query_one(f"#chart-{overlay.metric.chart}", LineChart)
        except NoMatches:
            chart = LineChart(overlay.metric.title, id=f"chart-{overlay.metric.chart}")
            self.view.query_one("#run-charts").mount(chart)
            if self.mark is not None:
                chart.set_marker(cursor_x(overlay, self.mark))
            return chart

    def _panel(self) -> Static:
        try:
            return self.view.query_one("#run-compare", Static)
        except NoMatches:
            panel = Static("", id="run-compare", markup=False)
            panel.styles.height = "auto"
            panel.styles.max_height = 4 + MAX_CHANGES_SHOWN
            panel.styles.padding = (0, 1)
            self.view.mount(panel, after="#run-state")
            return panel
