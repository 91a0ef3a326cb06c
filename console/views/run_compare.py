"""The Run view's comparison: the runs it is compared with, the comparison computed, and its header panel.

The numbers come from backend.signals.compare (the same `Comparison` `metrics --compare --json` prints); the
charts are drawn by console.widgets.chart_board, as the single run's are. This module holds what the view
compares (a comparison belongs to the run it was opened on: the view clears it when another run is shown) and
writes the panel: a header line per run in its chart colour, what changed from each other run to the first,
and each run's values at the rollout cursor; under 100 columns one short line per run.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING

from rich.text import Text

from backend.signals.compare import RunSide, compare, load_config
from backend.signals.series import ROLLOUT_AXIS, SeriesSetSnapshot
from console.widgets.chart_board import colours, cursor_x

if TYPE_CHECKING:
    from backend.signals.compare import CompareConfig, Comparison, MetricOverlay
    from backend.signals.launch_flags import FlagDiff, LaunchFlags
    from backend.signals.monitor import MetricsSnapshot
    from backend.signals.replay import RolloutMark
    from console.messages import BaselineAdded, RunStatus

RICH_COLOUR = {"orange": "dark_orange"}  # plotext's colour names that Rich spells differently
MAX_CHANGES_SHOWN = 6  # flag changes listed under the headers; `metrics --compare` lists them all
COMPACT_CHANGES_SHOWN = 2  # on its one row


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


def panel_text(comparison: Comparison, mark: RolloutMark | None = None, *, compact: bool = False) -> Text:
    """A header line per run (its colour), what changed from each other run to the first, and each run's
    values at the rollout cursor; compact: the changes cut short, no cursor line (the titles say where)."""
    text = Text()
    palette = colours(len(comparison.runs))
    for run, colour in zip(comparison.runs, palette, strict=True):
        text.append("■ ", RICH_COLOUR.get(colour, colour)).append(run.text() + "\n")
    first = comparison.runs[0].label
    for label, diff in comparison.changes:
        _changes(text, label, first, diff, COMPACT_CHANGES_SHOWN if compact else MAX_CHANGES_SHOWN)
    if mark is not None and not compact:
        at = [cursor_values(o, cursor_x(o.metric.axis, mark)) for o in comparison.overlays]
        text.append("cursor: ", "bold").append("  |  ".join(v for v in at if v))
    text.rstrip()
    return text


def _changes(text: Text, label: str, first: str, diff: FlagDiff | None, shown_at_most: int) -> None:
    if diff is None:
        text.append(f"changed {label} → {first}: launch flags unknown for one of them\n", "dim")
        return
    head = f"changed {label} → {first} ({diff.before_source} vs {diff.after_source}): "
    shown = [c.text() for c in diff.changes[:shown_at_most]]
    more = len(diff.changes) - len(shown)
    text.append(head, "bold").append(", ".join(shown) or "no flag differs")
    if more > 0:
        text.append(f", +{more} more (metrics --compare lists all)", "dim")
    text.append("\n")


def first_side(
    state: RunStatus | None,
    metrics: MetricsSnapshot | None,
    flags: LaunchFlags | None,
    *,
    replayed_state: str | None = None,
) -> RunSide:
    """The view's own run as the comparison's first side; a replay's (not live) is in the state its log
    ended in, where the replay knows it."""
    series = metrics.series if metrics is not None else SeriesSetSnapshot(MappingProxyType({}))
    label = state.job_id if state is not None else "this run"
    phase = state.phase if state is not None else "—"
    return RunSide(label, replayed_state or phase, series, flags, live=replayed_state is None)


class RunComparison:
    """What the Run view compares its run with (the baselines, their launch facts) and the last comparison
    computed from them; it draws nothing."""

    def __init__(self, config: Callable[[], CompareConfig] = load_config) -> None:
        self.baselines: tuple[RunSide, ...] = ()
        self.flags: LaunchFlags | None = None
        self.state: str | None = None
        self.comparison: Comparison | None = None
        self._config = config
        self._inputs: tuple[object, ...] | None = None  # what the comparison was computed from

    @property
    def active(self) -> bool:
        return bool(self.baselines)

    def add(self, message: BaselineAdded) -> None:
        self.baselines = (*self.baselines, message.side)
        self.flags = message.flags or self.flags
        self.state = message.state or self.state

    def compute(self, first: RunSide, metrics: object) -> Comparison | None:
        """The comparison of `first` (built from `metrics`) with the baselines; recomputed only when one of
        them changed (the view's 1 s tick changes nothing). None without baselines. A bad chart config raises
        its one-line ConsoleError."""
        if not self.baselines:
            return None
        inputs = (metrics, self.baselines, first.label, first.state)
        if self.comparison is not None and self._same(inputs):
            return self.comparison
        self._inputs = inputs
        self.comparison = compare((first, *self.baselines), self._config())
        return self.comparison

    def _same(self, inputs: tuple[object, ...]) -> bool:
        drawn = self._inputs
        return drawn is not None and drawn[0] is inputs[0] and drawn[1:] == inputs[1:]

    def clear(self) -> bool:
        """Drop every compared run (a key, or another run shown). False when there was none."""
        if not self.baselines:
            return False
        self.baselines, self.flags, self.state, self.comparison, self._inputs = (), None, None, None, None
        return True
