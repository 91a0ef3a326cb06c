"""Where every rank spends its time: a timeline of the last minutes, one lane per rank (grouped by node), a
glyph per phase, and each rank's current phase with its age.

It draws a `backend.signals.rank_phases.PhaseView` (computed off the UI thread) and nothing else. 128 ranks
fit at 200×50 by flowing the lanes into columns; when even that does not fit (80×24) each node becomes one
lane: per time slot the phase most of its ranks were in, and at the right the phase most of them are in now,
with the rank that has been in its phase longest named when it differs. Glyphs and colours are data
(`PHASE_GLYPHS`); a phase not listed shows its first letter.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static

from backend.cluster.durations import fmt_duration
from backend.signals.rank_phases import LaneView, PhaseView
from console import keymap

WINDOW_S = 300.0
# phase name -> (glyph, colour); miles' Timer names and the rollout manager's phases
PHASE_GLYPHS: dict[str, tuple[str, str]] = {
    "rollout": ("R", "cyan"),
    "eval_rollout": ("E", "cyan"),
    "generate": ("R", "cyan"),
    "actor_train": ("█", "magenta"),
    "train": ("█", "magenta"),
    "critic_train": ("▓", "magenta"),
    "train_wait": ("·", "yellow"),
    "update_weights": ("W", "green"),
    "log_probs": ("L", "blue"),
    "ref_log_probs": ("l", "blue"),
    "data_preprocess": ("d", "white"),
    "sleep": ("z", "bright_black"),
    "wake_up": ("u", "bright_black"),
    "save_model": ("S", "red"),
    "initialize": ("i", "bright_black"),
}
LABEL_W = 8
STATUS_W = 20
MIN_BARS = 16


def glyph(name: str | None) -> tuple[str, str]:
    if not name:
        return " ", ""
    return PHASE_GLYPHS.get(name, (name[:1] or "?", "white"))


def node_tag(node: str) -> str:
    """How a lane names its node in 4 characters: an IPv4's last number, else the name's tail."""
    tail = node.rsplit(".", 1)[-1] if node.count(".") == 3 else node
    return tail[-4:]


def _slots(lane: LaneView, start: float, width: int, now: float, window_s: float) -> list[str | None]:
    """The phase at the middle of each of `width` time slots from `start` to `now`."""
    out: list[str | None] = [None] * width
    step = window_s / width
    for span in lane.spans:
        end = now if math.isnan(span.t1) else span.t1
        if end < start:
            continue
        first = max(0, math.ceil((span.t0 - start) / step - 0.5))
        last = min(width - 1, math.ceil((end - start) / step - 0.5) - 1)
        for i in range(first, last + 1):
            out[i] = span.name
    return out


def _age(now: float, since: float) -> str:
    return fmt_duration(now - since) if math.isfinite(since) and math.isfinite(now) else "?"


def _bars(text: Text, slots: Sequence[str | None]) -> None:
    for name in slots:
        g, colour = glyph(name)
        text.append(g, colour)


def _cell(text: Text, value: str, width: int, style: str = "") -> None:
    text.append(value[:width].ljust(width), style)


def _rank_rows(
    view: PhaseView, now: float, width: int, rows: int, window_s: float, stages: Mapping[int, str]
) -> list[Text] | None:
    """One lane per rank in as few columns as fit `rows` (None when even the widest layout does not fit)."""
    lanes = list(view.lanes)
    if not lanes:
        return []
    stage_w = max((len(s) for s in stages.values()), default=0)
    label_w = LABEL_W + (stage_w + 1 if stage_w else 0)
    for cols in range(1, max(1, width // (label_w + MIN_BARS + STATUS_W + 1)) + 1):
        per = math.ceil(len(lanes) / cols)
        if per <= rows:
            bars = (width - (cols - 1)) // cols - label_w - STATUS_W
            out = [Text(no_wrap=True, overflow="crop") for _ in range(per)]
            for i, lane in enumerate(lanes):
                row = out[i % per]
                if i >= per:
                    row.append(" ")
                _rank_lane(row, lane, _Lane(now, window_s, label_w, bars), stages.get(lane.rank, ""))
            return out
    return None


@dataclass(frozen=True)
class _Lane:
    """How one rank's lane is drawn: as of `now`, over `window_s`, a label and a bar this wide."""

    now: float
    window_s: float
    label_w: int
    bars: int


def _rank_lane(row: Text, lane: LaneView, at: _Lane, stage: str) -> None:
    """`node:rank stage`, the bars of the window, then the phase now and for how long."""
    who = str(lane.rank) if lane.rank >= 0 else lane.role[:3]
    label = f"{node_tag(lane.node)}:{who}"
    _cell(row, f"{label} {stage}" if stage else label, at.label_w, "dim")
    _bars(row, _slots(lane, at.now - at.window_s, at.bars, at.now, at.window_s))
    now_text = f" {lane.current} {_age(at.now, lane.since)}" if lane.current else " idle"
    _cell(row, now_text, STATUS_W, glyph(lane.current)[1])


def _node_rows(view: PhaseView, now: float, width: int, rows: int, window_s: float) -> list[Text]:
    """One lane per node: the majority phase per slot and
    now; the rank longest in its phase when it differs."""
    by_node: dict[str, list[LaneView]] = {}
    for lane in view.lanes:
        by_node.setdefault(lane.node, []).append(lane)
    status_w = max(STATUS_W, min(44, width // 3))
    bars = max(4, width - LABEL_W - status_w)
    out = []
    nodes = list(by_node.items())
    shown = nodes if len(nodes) <= rows else nodes[: rows - 1]
    for node, lanes in shown:
        row = Text(no_wrap=True, overflow="crop")
        _cell(row, f"{node_tag(node)} ×{len(lanes)}", LABEL_W, "dim")
        columns = [_slots(lane, now - window_s, bars, now, window_s) for lane in lanes]
        _bars(row, [Counter(c[i] for c in columns).most_common(1)[0][0] for i in range(bars)])
        common, status = _node_status(lanes, now)
        _cell(row, status, status_w, glyph(common)[1])
        out.append(row)
    if len(shown) < len(nodes):
        out.append(Text(f"… {len(nodes) - len(shown)} more node(s): widen the terminal", "dim"))
    return out


def _node_status(lanes: Sequence[LaneView], now: float) -> tuple[str | None, str]:
    """(the phase most of a node's ranks are in now, "n/N phase" and the odd rank out longest in its own)."""
    common, n = Counter(lane.current for lane in lanes).most_common(1)[0]
    status = f" {n}/{len(lanes)} {common or 'idle'}"
    odd = [lane for lane in lanes if lane.current != common]
    if not odd:
        return common, status + f" {_age(now, min(lane.since for lane in lanes))}"
    oldest = min(odd, key=lambda lane: lane.since if math.isfinite(lane.since) else math.inf)
    return common, status + f"; r{oldest.rank} {oldest.current or 'idle'} {_age(now, oldest.since)}"


def render_timeline(
    view: PhaseView | None,
    now: float,
    width: int,
    height: int,
    *,
    window_s: float = WINDOW_S,
    stages: Mapping[int, str] | None = None,
) -> Text:
    """The whole timeline as text, `width` × at most `height` lines."""
    if view is None or not view.lanes:
        return Text(
            "no per-rank phases yet: they come from miles' dashboard stream (run.miles_dashboard = true, "
            "which adds --use-miles-dashboard to argv) or the log's Timer lines that carry a rank",
            "dim",
        )
    ranks = sum(1 for lane in view.lanes if lane.rank >= 0)
    nodes = len({lane.node for lane in view.lanes})
    idle = _age(now, view.last_change)
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append("phases ", "bold").append(
        f"last {fmt_duration(window_s)} · {ranks} rank(s) on {nodes} node(s) · "
        f"from {view.source} · last change {idle} ago",
        "dim",
    )
    rows = max(1, height - 2)
    body = _rank_rows(view, now, width, rows, window_s, stages or {})
    if body is None:
        body = _node_rows(view, now, width, rows, window_s)
    lines = [head, *body, _legend(view)]
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return Text("\n").join(lines)


def _legend(view: PhaseView) -> Text:
    """Each phase the lanes show, with its glyph."""
    legend = Text(no_wrap=True, overflow="ellipsis")
    for name in sorted({s.name for lane in view.lanes for s in lane.spans}):
        g, colour = glyph(name)
        legend.append(g, colour).append(f" {name}  ", "dim")
    return legend


class PhaseTimeline(Widget):
    """The timeline; `update_view(view)` from the run view's metrics messages; ages move with `clock`."""

    DEFAULT_CSS = """
    PhaseTimeline { height: 1fr; }
    """

    def __init__(self, clock: Callable[[], float] = time.time, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: PhaseView | None = None
        self.clock = clock
        self.stages: Mapping[int, str] = {}

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)

    def update_view(self, view: PhaseView | None, stages: Mapping[int, str] | None = None) -> None:
        self.view = view
        if stages is not None:
            self.stages = stages
        self.refresh()

    def render(self) -> Text:
        now = self.clock() + (self.view.offset if self.view is not None else 0.0)
        return render_timeline(self.view, now, self.size.width, self.size.height, stages=self.stages)


class PhasesScreen(ModalScreen[None]):
    """The timeline over the whole terminal (the run view's `T`), kept current by the run view."""

    DEFAULT_CSS = """
    PhasesScreen { background: $background; }
    PhasesScreen > Vertical { height: 1fr; padding: 0 1; }
    PhasesScreen #phases-help { height: 1; color: $text-muted; }
    """
    BINDINGS = keymap.bindings_for("phases")

    def __init__(
        self,
        view: PhaseView | None,
        clock: Callable[[], float] = time.time,
        stages: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__()
        self._initial = (view, stages)
        self._clock = clock

    def compose(self) -> ComposeResult:
        with Vertical():
            yield PhaseTimeline(self._clock, id="phases")
            yield Static("Esc: back to the run view", id="phases-help")

    def on_mount(self) -> None:
        self.query_one(PhaseTimeline).update_view(*self._initial)

    def update_view(self, view: PhaseView | None) -> None:
        self.query_one(PhaseTimeline).update_view(view)

    def action_close(self) -> None:
        self.dismiss(None)
