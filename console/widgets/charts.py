"""Line charts with axes, drawn by plotext into cached Strips (line API).

Why plotext: real axes, ticks, legends and braille lines from a pure-Python library that
builds a plain string in ~3 ms; we turn it into Strips once per (data, size) and re-send
nothing while neither changes. plotext keeps global figure state, so charts are built on
the UI thread only (never from a worker).

The console does not compute series: the run view hands each chart the points backend
produced (`ChartSeries`), and the chart only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotext as plt
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

MAX_POINTS = 400  # plotext cost grows with points; a chart is at most ~250 columns wide anyway


@dataclass(frozen=True)
class ChartSeries:
    """One line: label, (x, y) points, a plotext colour name, and which y axis it uses."""

    label: str
    points: tuple[tuple[float, float], ...]
    color: str = "cyan"
    right: bool = False


def _thin(points: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    picked = tuple(points[int(i * step)] for i in range(MAX_POINTS - 1))
    return (*picked, points[-1])


def _unit(values: list[float]) -> tuple[float, str]:
    """Display scale for an axis so tick labels stay short in narrow charts (2548804 -> 2549k)."""
    top = max((abs(v) for v in values), default=0.0)
    if top >= 1e9:
        return 1e9, "G"
    if top >= 1e6:
        return 1e6, "M"
    if top >= 1e4:
        return 1e3, "k"
    return 1.0, ""


def build_chart(
    title: str,
    series: Sequence[ChartSeries],
    width: int,
    height: int,
    *,
    x_label: str = "",
    y_label: str = "",
    right_label: str = "",
    marker: float | None = None,
) -> list[str]:
    """The chart as lines of ANSI text (plotext), or a placeholder when there is no data; `marker` draws a
    vertical line at that x (the replay's rollout cursor)."""
    drawable = [s for s in series if s.points]
    if width < 16 or height < 5 or not drawable:
        lines = [title[:width].center(width)] if height else []
        if height > 1:
            note = "waiting for metrics" if not drawable else "too small"
            lines += [""] * max(0, (height - 1) // 2 - 1) + [note.center(width)]
        return lines[:height]
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    scale = {
        side: _unit([p[1] for s in drawable if s.right == side for p in s.points]) for side in (False, True)
    }
    for s in drawable:
        pts = _thin(s.points)
        factor = scale[s.right][0]
        plt.plot(
            [p[0] for p in pts],
            [p[1] / factor for p in pts],
            label=s.label,
            color=s.color,
            marker="braille",
            yside="right" if s.right else "left",
        )
    if marker is not None:
        plt.vline(marker, "red")
    plt.title(title if marker is None else f"{title} · at {marker:g}")
    if x_label:
        plt.xlabel(x_label)
    for side, label in ((False, y_label), (True, right_label)):
        suffix = scale[side][1]
        text = f"{label} ({suffix})" if label and suffix else label or (f"({suffix})" if suffix else "")
        if text:
            plt.ylabel(text, yside="right" if side else "left")
    return plt.build().split("\n")[:height]


class LineChart(Widget, can_focus=False):
    """A chart that redraws only when its series or its size change."""

    DEFAULT_CSS = """
    LineChart { height: 1fr; min-height: 5; }
    """

    def __init__(
        self,
        title: str,
        *,
        x_label: str = "",
        y_label: str = "",
        right_label: str = "",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.title = title
        self.x_label, self.y_label, self.right_label = x_label, y_label, right_label
        self._series: tuple[ChartSeries, ...] = ()
        self._strips: list[Strip] = []
        self._key: tuple[tuple[ChartSeries, ...], int, int, float | None] | None = None
        self._marker: float | None = None
        self.builds = 0  # how many times plotext ran (tests and benchmarks read it)

    @property
    def series(self) -> tuple[ChartSeries, ...]:
        return self._series

    def set_title(self, title: str) -> None:
        """Change the title (e.g. to name the data's source); redraws only if it changed."""
        if title != self.title:
            self.title = title
            self._key = None
            self.refresh()

    def set_labels(self, x_label: str = "", y_label: str = "", right_label: str = "") -> None:
        """Change the axis labels (a comparison's chart names
        its unit in the title); redraws if they changed."""
        if (x_label, y_label, right_label) != (self.x_label, self.y_label, self.right_label):
            self.x_label, self.y_label, self.right_label = x_label, y_label, right_label
            self._key = None
            self.refresh()

    def set_series(self, series: Sequence[ChartSeries]) -> bool:
        """Replace the data; returns False (and repaints nothing) if it is unchanged."""
        new = tuple(series)
        if new == self._series:
            return False
        self._series = new
        self.refresh()
        return True

    @property
    def marker(self) -> float | None:
        return self._marker

    def set_marker(self, x: float | None) -> None:
        """Mark x with a vertical line (None: no mark)."""
        if x != self._marker:
            self._marker = x
            self.refresh()

    def _ensure(self) -> None:
        width, height = self.size
        key = (self._series, width, height, self._marker)
        if key == self._key:
            return
        self._key = key
        self.builds += 1
        lines = build_chart(
            self.title,
            self._series,
            width,
            height,
            x_label=self.x_label,
            y_label=self.y_label,
            right_label=self.right_label,
            marker=self._marker,
        )
        console = self.app.console
        base = self.rich_style
        strips = []
        for line in lines:
            text = Text.from_ansi(line, no_wrap=True, end="")
            strips.append(Strip(list(text.render(console))).crop_extend(0, width, None).apply_style(base))
        self._strips = strips

    def render_line(self, y: int) -> Strip:
        self._ensure()
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)
