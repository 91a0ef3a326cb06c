"""Line charts with axes, drawn by plotext into cached Strips (line API).

Why plotext: real axes, ticks, legends and braille lines from a pure-Python library that
builds a plain string in ~3 ms; we turn it into Strips once per (data, size) and re-send
nothing while neither changes. plotext keeps global figure state, so charts are built on
the UI thread only (never from a worker).

The console does not compute series: the run view hands each chart the points backend
produced (`ChartSeries`), and the chart only draws them.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace

import plotext as plt
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from console.widgets import chart_axes as axes

MAX_POINTS = 400  # plotext cost grows with points; a chart is at most ~250 columns wide anyway
MIN_WIDTH, MIN_HEIGHT = 16, 5  # below this a chart says "too small"
LEGEND_FROM = 7  # rows from which a chart has a legend row under its title
TWO_LEGEND_ROWS_FROM = 10  # rows from which a legend that does not fit one row takes two
LABELS_FROM = 9  # plot rows from which the axes are named under the x ticks


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


@dataclass(frozen=True)
class ChartFrame:
    """What a chart draws around its lines: the title (its first row, always), the axes' labels, which y
    axes start at zero (a count, a rate, a duration), the cursor's mark and the words of an empty chart."""

    title: str
    x_label: str = ""
    y_label: str = ""
    right_label: str = ""
    zero: tuple[bool, bool] = (False, False)  # (left, right)
    marker: float | None = None
    note: str = "waiting for metrics"

    def heading(self) -> str:
        return self.title if self.marker is None else f"{self.title} · at {self.marker:g}"


def build_chart(frame: ChartFrame, series: Sequence[ChartSeries], width: int, height: int) -> list[str]:
    """The chart as lines of ANSI text: its title, a legend row (where there is height for it), then the
    plot (plotext, with our ticks); a placeholder when there is no data."""
    drawable = [s for s in series if s.points]
    if width < MIN_WIDTH or height < MIN_HEIGHT or not drawable:
        return _placeholder(frame.heading(), width, height, frame.note if not drawable else "too small")
    head = [_fit(frame.heading(), width)]
    if height >= LEGEND_FROM:
        head += legend_rows(drawable, width, 2 if height >= TWO_LEGEND_ROWS_FROM else 1)
    return head + _plot_lines(frame, drawable, width, height - len(head))


def _plot_lines(frame: ChartFrame, drawable: Sequence[ChartSeries], width: int, height: int) -> list[str]:
    """The plot area: lines, round ticks (zero-based where the frame says), the marker, the axis labels."""
    plt.clear_figure()
    plt.limitsize(False, False)  # plotext caps a plot at its guess of the terminal size; the widget knows
    plt.plotsize(width, height)
    plt.theme("clear")
    labelled = height >= LABELS_FROM
    for s in drawable:
        _plot(s)
    _x_axis(drawable, width)
    for right in (False, True):
        _y_axis([s for s in drawable if s.right == right], right, frame.zero[right], height - 3)
    if frame.marker is not None:
        plt.vline(frame.marker, "red")
    if labelled:
        _labels(frame, drawable)
    return plt.build().split("\n")[:height]


def _x_axis(drawable: Sequence[ChartSeries], width: int) -> None:
    xs = [p[0] for s in drawable for p in s.points]
    whole = all(float(x).is_integer() for x in xs)
    marks = axes.ticks(xs, max(2, min(8, width // 10)), integer=whole)
    plt.xlim(*marks.limits)
    plt.xticks(list(marks.values), list(marks.labels))


def _y_axis(side: Sequence[ChartSeries], right: bool, zero: bool, rows: int) -> None:
    if not side:
        return
    yside = "right" if right else "left"
    marks = axes.ticks([p[1] for s in side for p in s.points], max(2, min(6, rows // 2)), zero=zero)
    plt.ylim(*marks.limits, yside=yside)
    plt.yticks(list(marks.values), list(marks.labels), yside=yside)


def _labels(frame: ChartFrame, drawable: Sequence[ChartSeries]) -> None:
    if frame.x_label:
        plt.xlabel(frame.x_label)
    if frame.y_label and any(not s.right for s in drawable):
        plt.ylabel(frame.y_label, yside="left")
    if frame.right_label and any(s.right for s in drawable):
        plt.ylabel(frame.right_label, yside="right")


def legend_rows(drawable: Sequence[ChartSeries], width: int, rows: int) -> list[str]:
    """The legend on one row where every label fits whole, else over up to `rows` rows (then cut)."""
    whole = sum(len(_entry(s, s.label)) + 2 for s in drawable) - 2
    if whole <= width or rows <= 1:
        return [legend(drawable, width)]
    per_row = math.ceil(len(drawable) / rows)
    return [legend(drawable[i : i + per_row], width) for i in range(0, len(drawable), per_row)]


def legend(drawable: Sequence[ChartSeries], width: int) -> str:
    """One row naming every line in its colour (`━ label`, `▸` for the right axis); labels are cut in the
    middle, the ends kept, until the row fits: the short ones stay whole, the long ones share the rest."""
    fixed = sum(len(_entry(s, "")) + 2 for s in drawable) - 2
    rooms = shares([len(s.label) for s in drawable], width - fixed)
    entries = [
        _entry(s, legend_label(s.label, max(3, room))) for s, room in zip(drawable, rooms, strict=True)
    ]
    pad = " " * max(0, (width - len("  ".join(entries))) // 2)
    return pad + "  ".join(plt.colorize(e, s.color) for s, e in zip(drawable, entries, strict=True))


def shares(lengths: Sequence[int], room: int) -> list[int]:
    """Columns for each of `lengths` out of `room`: the shortest first, each at most an even share of what
    is left."""
    out = [0] * len(lengths)
    left = room
    for n, i in enumerate(sorted(range(len(lengths)), key=lambda i: lengths[i])):
        out[i] = min(lengths[i], max(0, left) // (len(lengths) - n))
        left -= out[i]
    return out


def _entry(s: ChartSeries, label: str) -> str:
    return f"━ {label}{' ▸' if s.right else ''}"


def legend_label(label: str, room: int) -> str:
    """A label cut in the middle to `room` characters; the ends stay, where run ids and file names differ."""
    if room <= 0 or len(label) <= room:
        return label
    head = (room - 1) // 2
    return label[:head] + "…" + label[len(label) - (room - 1 - head) :]


def _fit(text: str, width: int) -> str:
    """A title on one row: centred, cut with an ellipsis where the chart is narrower than it."""
    return (text if len(text) <= width else text[: max(0, width - 1)] + "…").center(width)


def _placeholder(title: str, width: int, height: int, note: str) -> list[str]:
    """A chart with nothing to draw: its title and why (the backend's words, wrapped) in the middle."""
    lines = [_fit(title, width)] if height else []
    if height > 1:
        words = textwrap.wrap(note, max(8, width)) or [""]
        lines += [""] * max(0, (height - len(words)) // 2 - 1) + [_fit(w, width) for w in words]
    return lines[:height]


def _plot(s: ChartSeries) -> None:
    pts = _thin(s.points)
    plt.plot(
        [p[0] for p in pts],
        [p[1] for p in pts],
        color=s.color,
        marker="braille",
        yside="right" if s.right else "left",
    )


class LineChart(Widget, can_focus=False):
    """A chart that redraws only when what it draws (its frame, its series) or its size change."""

    DEFAULT_CSS = """
    LineChart { height: 1fr; min-height: 5; }
    """

    def __init__(self, frame: ChartFrame, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.frame = frame
        self._series: tuple[ChartSeries, ...] = ()
        self._strips: list[Strip] = []
        self._key: tuple[ChartFrame, tuple[ChartSeries, ...], int, int] | None = None
        self.builds = 0  # how many times plotext ran (tests and benchmarks read it)

    @property
    def title(self) -> str:
        return self.frame.title

    @property
    def note(self) -> str:
        return self.frame.note

    @property
    def marker(self) -> float | None:
        return self.frame.marker

    @property
    def series(self) -> tuple[ChartSeries, ...]:
        return self._series

    def set_frame(self, frame: ChartFrame) -> None:
        """Change what is drawn around the lines (title, axes, zero baseline, mark, note); a repaint only if
        it changed."""
        if frame != self.frame:
            self.frame = frame
            self.refresh()

    def set_marker(self, x: float | None) -> None:
        """Mark x with a vertical line (None: no mark)."""
        self.set_frame(replace(self.frame, marker=x))

    def set_series(self, series: Sequence[ChartSeries]) -> bool:
        """Replace the data; returns False (and repaints nothing) if it is unchanged."""
        new = tuple(series)
        if new == self._series:
            return False
        self._series = new
        self.refresh()
        return True

    def _ensure(self) -> None:
        width, height = self.size
        key = (self.frame, self._series, width, height)
        if key == self._key:
            return
        self._key = key
        self.builds += 1
        console, base = self.app.console, self.rich_style
        self._strips = [
            Strip(list(Text.from_ansi(line, no_wrap=True, end="").render(console)))
            .crop_extend(0, width, None)
            .apply_style(base)
            for line in build_chart(self.frame, self._series, width, height)
        ]

    def render_line(self, y: int) -> Strip:
        self._ensure()
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)
