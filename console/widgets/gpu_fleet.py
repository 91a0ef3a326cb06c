"""The GPU fleet as ONE line-API widget: a row per node, a cell per GPU.

Why one widget: 128 separate Statics, one per GPU, cost about 3x the CPU of one grid at 1 Hz.
Why line API: rows are Strips built once per snapshot and re-sent only when their content
changed, so an unchanged fleet costs no terminal bytes at all.

Each cell shows utilisation as background shading and memory as a second shade (or a glyph
height when compact). "No telemetry" (`gpus is None`) is drawn as `?`/words, never as 0%;
a dead node is marked in red with its death reason.

The layout picks the richest of three cell modes that fits the widget's height:
  full   one node per row, `util% memGiB` per GPU (16 x 8 fits 80 columns);
  medium several nodes per row, 3 chars per GPU (util digits + memory glyph);
  glyph  one character per GPU (memory glyph on utilisation shade): 1024 GPUs in 80 x 17;
  node   aggregated, one character per node (its mean), when even glyph rows do not fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from backend.cluster.telemetry import ClusterSnapshot

MEM_GLYPHS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class GpuCell:
    """What one cell draws: utilisation (0-100, None = unknown) and memory (MiB)."""

    util: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None

    @property
    def mem_frac(self) -> float | None:
        if self.mem_used_mb is None or not self.mem_total_mb:
            return None
        return max(0.0, min(1.0, self.mem_used_mb / self.mem_total_mb))


@dataclass(frozen=True)
class NodeRow:
    """One node as the widget draws it; `gpus is None` means the node reports no GPU telemetry."""

    label: str
    alive: bool
    gpus: tuple[GpuCell, ...] | None
    note: str = ""
    expected_gpus: int = 8
    stale: bool = False


def fleet_rows(snapshot: ClusterSnapshot | None, gpus_per_node: int = 8) -> tuple[NodeRow, ...]:
    """Adapt a backend ClusterSnapshot (nodes with alive/death_reason/gpus) to drawable rows."""
    if snapshot is None:
        return ()
    rows: list[NodeRow] = []
    for i, node in enumerate(snapshot.nodes):
        gpus = None if node.gpus is None else tuple(
            GpuCell(g.utilization_pct, g.mem_used_mb, g.mem_total_mb) for g in node.gpus)
        expected = len(gpus) if gpus else gpus_per_node
        note = "" if node.alive else (node.death_reason or "dead")
        label = node.name or node.hostname or node.ip or f"node-{i}"
        rows.append(NodeRow(label, node.alive, gpus, note, expected, node.stale))
    return tuple(rows)


# ---------------------------------------------------------------- styles (built once)

_UTIL_BG = ("#262626", "#1d4d2a", "#2a7038", "#3d9a45", "#5cc65a", "#8ef07a")
_MEM_BG = ("#262626", "#1f3550", "#27507a", "#336ca3", "#4a8ccc", "#6fb0f0")
_DEAD = Style(color="#ffffff", bgcolor="#8b1a1a", bold=True)
_UNKNOWN = Style(color="#9a9a9a", bgcolor="#303030", italic=True)
_LABEL = Style(bold=True)
_LABEL_DEAD = Style(color="#ff5f5f", bold=True)
_DIM = Style(dim=True)
_PLAIN = Style()


def _level(frac: float, n: int) -> int:
    return min(n - 1, max(0, int(frac * (n - 1) + 0.5)))


def _fg_for(level: int, n: int) -> str:
    return "#000000" if level >= n // 2 + 1 else "#e6e6e6"


_UTIL_STYLES = tuple(Style(color=_fg_for(i, len(_UTIL_BG)), bgcolor=c) for i, c in enumerate(_UTIL_BG))
_MEM_STYLES = tuple(Style(color=_fg_for(i, len(_MEM_BG)), bgcolor=c) for i, c in enumerate(_MEM_BG))
_GLYPH_STYLES = tuple(Style(color="#d0d0ff" if i < 3 else "#10203a", bgcolor=c) for i, c in enumerate(_UTIL_BG))


def _util_style(util: float) -> Style:
    return _UTIL_STYLES[_level(util / 100.0, len(_UTIL_STYLES))]


def _mem_glyph(frac: float | None) -> str:
    if frac is None:
        return "?"
    return MEM_GLYPHS[max(1, _level(frac, len(MEM_GLYPHS)))]


# ---------------------------------------------------------------- layout (pure)

@dataclass(frozen=True)
class Mode:
    name: str
    cell: int  # characters per GPU


FULL = Mode("full", 8)
MEDIUM = Mode("medium", 3)
GLYPH = Mode("glyph", 1)
NODE = Mode("node", 0)  # aggregated: one character per node (mean utilisation shade, mean memory glyph)
MODES = (FULL, MEDIUM, GLYPH)


def _label_width(rows: Sequence[NodeRow]) -> int:
    return min(12, max((len(r.label) for r in rows), default=4)) + 1


def _gpus_per_node(rows: Sequence[NodeRow]) -> int:
    return max((len(r.gpus) if r.gpus is not None else r.expected_gpus for r in rows), default=8)


def plan_layout(rows: Sequence[NodeRow], width: int, height: int) -> tuple[Mode, int]:
    """(mode, nodes per row): the richest mode whose rows fit `height` (header included)."""
    g = _gpus_per_node(rows)
    n = max(1, len(rows))
    for mode in MODES:
        if mode is FULL:
            need = _label_width(rows) + g * mode.cell
            if need <= width and n + 1 <= height:
                return mode, 1
            continue
        npr = _nodes_per_row(mode, g, len(rows), width)
        if npr and math.ceil(n / npr) + 1 <= height:
            return mode, npr
    return NODE, max(1, _nodes_per_row(NODE, g, len(rows), width))


def _index_width(count: int) -> int:
    return len(str(max(0, count - 1)))


def _nodes_per_row(mode: Mode, g: int, count: int, width: int) -> int:
    if mode is MEDIUM:  # each node block: "n12" + cells + gap
        block = 1 + _index_width(count) + 1 + g * mode.cell + 1
        return max(0, (width + 1) // block)
    if mode is NODE:  # row label, then one character per node, a space every 8 nodes
        room = width - _index_width(count) - 1
        return max(1, room - room // 9)
    block = g * mode.cell + 1  # glyph: row label, then blocks of g chars separated by a space
    return max(0, (width - _index_width(count) - 2 + 1) // block)


def _summary(rows: Sequence[NodeRow], mode: Mode, width: int) -> list[Segment]:
    alive = sum(r.alive for r in rows)
    gpus = [c for r in rows if r.alive and r.gpus for c in r.gpus]
    utils = [c.util for c in gpus if c.util is not None]
    mems = [f for c in gpus if (f := c.mem_frac) is not None]
    no_tel = sum(1 for r in rows if r.alive and r.gpus is None)
    total = sum(len(r.gpus) if r.gpus is not None else r.expected_gpus for r in rows)
    text = f"{total} GPUs {alive}/{len(rows)} nodes up"
    segs = [Segment(text, _LABEL)]
    if utils:
        segs.append(Segment(f"  util {sum(utils) / len(utils):.0f}% mem {100 * sum(mems) / max(1, len(mems)):.0f}%"))
    if no_tel:
        segs.append(Segment(f"  {no_tel} no telemetry", _UNKNOWN))
    if len(rows) - alive:
        segs.append(Segment(f"  {len(rows) - alive} dead", _LABEL_DEAD))
    if stale := sum(1 for r in rows if r.alive and r.stale):
        segs.append(Segment(f"  {stale} stale", _UNKNOWN))
    key = {FULL: "  [util% memGiB]", NODE: "  [a node per char: shade=util glyph=mem]"}.get(
        mode, "  [shade=util glyph=mem]")
    if sum(len(s.text) for s in segs) + len(key) <= width:
        segs.append(Segment(key, _DIM))
    return segs


def _full_row(row: NodeRow, lw: int, g: int) -> list[Segment]:
    label = row.label[: lw - 1].ljust(lw)
    if not row.alive:
        return [Segment(("✗" + label)[:lw], _LABEL_DEAD), Segment(f" dead: {row.note} "[: g * FULL.cell], _DEAD)]
    segs = [Segment(label, _UNKNOWN if row.stale else _LABEL)]
    if row.gpus is None:
        segs.append(Segment(" no telemetry ".ljust(g * FULL.cell - 1)[: g * FULL.cell - 1], _UNKNOWN))
        return segs
    for cell in row.gpus:
        if cell.util is None:
            segs.append(Segment("  ? ", _UNKNOWN))
        else:
            segs.append(Segment(f"{cell.util:>3.0f}%", _util_style(cell.util)))
        frac = cell.mem_frac
        if frac is None or cell.mem_used_mb is None:
            segs.append(Segment("  ?", _UNKNOWN))
        else:
            segs.append(Segment(f"{cell.mem_used_mb / 1024:>3.0f}"[-3:], _MEM_STYLES[_level(frac, len(_MEM_STYLES))]))
        segs.append(Segment(" "))
    return segs


def _node_cell(row: NodeRow) -> Segment:
    """One node as one character: × dead, ? no telemetry, else mean memory glyph on mean util shade."""
    if not row.alive:
        return Segment("×", _DEAD)
    utils = [c.util for c in row.gpus or () if c.util is not None]
    if row.gpus is None or not utils:
        return Segment("?", _UNKNOWN)
    mems = [f for c in row.gpus if (f := c.mem_frac) is not None]
    glyph = _mem_glyph(sum(mems) / len(mems) if mems else None)
    return Segment(glyph, _GLYPH_STYLES[_level(sum(utils) / len(utils) / 100.0, len(_UTIL_BG))])


def _compact_cells(row: NodeRow, mode: Mode, g: int) -> list[Segment]:
    if not row.alive:
        return [Segment("×" * (g * mode.cell), _DEAD)]
    if row.gpus is None:
        return [Segment("?" * (g * mode.cell), _UNKNOWN)]
    segs: list[Segment] = []
    for cell in row.gpus:
        glyph = _mem_glyph(cell.mem_frac)
        if cell.util is None:
            segs.append(Segment(("?" if mode is GLYPH else "?" + " " + glyph)[: mode.cell].rjust(mode.cell), _UNKNOWN))
            continue
        lvl = _level(cell.util / 100.0, len(_UTIL_BG))
        if mode is GLYPH:
            segs.append(Segment(glyph, _GLYPH_STYLES[lvl]))
        else:
            digits = "99" if cell.util >= 99.5 else f"{cell.util:>2.0f}"
            segs.append(Segment(digits + glyph, _UTIL_STYLES[lvl]))
    pad = g - len(row.gpus)
    if pad > 0:
        segs.append(Segment(" " * pad * mode.cell))
    return segs


def build_lines(rows: Sequence[NodeRow], width: int, height: int) -> tuple[Mode, list[list[Segment]]]:
    """All lines of the fleet (header first) as segment lists; pure, so tests can read them."""
    mode, npr = plan_layout(rows, width, height)
    g = _gpus_per_node(rows)
    lines: list[list[Segment]] = [_summary(rows, mode, width)]
    if not rows:
        lines.append([Segment("no nodes reported yet", _DIM)])
        return mode, lines
    if mode is FULL:
        lw = _label_width(rows)
        lines.extend(_full_row(r, lw, g) for r in rows)
        return mode, lines
    iw = _index_width(len(rows))
    if mode is NODE:
        for start in range(0, len(rows), npr):
            segs = [Segment(f"{start:>{iw}} ", _DIM)]
            for j, row in enumerate(rows[start: start + npr]):
                if j and j % 8 == 0:
                    segs.append(Segment(" "))
                segs.append(_node_cell(row))
            lines.append(segs)
        return mode, lines
    for start in range(0, len(rows), npr):
        chunk = rows[start: start + npr]
        segs = []
        if mode is GLYPH:
            segs.append(Segment(f"{start:>{iw}} ", _DIM))
        for j, row in enumerate(chunk):
            if mode is MEDIUM:
                style = _LABEL_DEAD if not row.alive else _DIM
                segs.append(Segment(f"n{start + j:<{iw}} ", style))
            segs.extend(_compact_cells(row, mode, g))
            segs.append(Segment(" "))
        lines.append(segs)
    return mode, lines


def line_text(segments: Iterable[Segment]) -> str:
    return "".join(s.text for s in segments)


# ---------------------------------------------------------------- the widget

class GpuFleet(ScrollView, can_focus=False):
    """Draws a ClusterSnapshot; `update_snapshot` repaints only the rows whose content changed."""

    DEFAULT_CSS = """
    GpuFleet { height: 1fr; min-height: 3; overflow-x: hidden; }
    """

    def __init__(self, *, max_share: float = 1.0, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.max_share = max_share  # with `height: auto`: the part of the parent's height it may take
        self._rows: tuple[NodeRow, ...] = ()
        self._strips: list[Strip] = []
        self._key: tuple[tuple[NodeRow, ...], int, int] | None = None
        self.mode: Mode = FULL
        self._wanted = -1  # the height last asked for (see _check_height)
        self._shape: tuple[int, ...] = ()

    @property
    def rows(self) -> tuple[NodeRow, ...]:
        return self._rows

    def update_snapshot(self, snapshot: ClusterSnapshot | None) -> bool:
        """Take a new snapshot; returns True if anything on screen changed."""
        rows = fleet_rows(snapshot)
        if rows == self._rows and self._strips:
            return False
        self._rows = rows
        self._check_height()
        return self._rebuild()

    def _check_height(self) -> None:
        """With `height: auto`, ask for a new layout only when the height this fleet wants changes
        (nodes joined or left, a mode change), not on every new reading: the wanted height depends
        on the fleet's shape, never on its values."""
        parent = self.parent
        if not isinstance(parent, Widget) or not self.styles.height or not self.styles.height.is_auto:
            return
        room = max(3, int(parent.size.height * self.max_share))
        rows = self._rows
        shape = (len(rows), _gpus_per_node(rows), _label_width(rows), self.size.width, room)
        if shape == self._shape:
            return
        self._shape = shape
        wanted = min(len(build_lines(rows, self.size.width or 80, room)[1]), room)
        if wanted != self._wanted:
            self._wanted = wanted
            self.refresh(layout=True)

    def on_resize(self) -> None:
        self._rebuild()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As tall as the richest layout that fits `max_share` of the room offered (`height: auto`)."""
        _, lines = build_lines(self._rows, width or 80, max(3, int(container.height * self.max_share)))
        return min(len(lines), max(3, int(container.height * self.max_share)))

    def _rebuild(self) -> bool:
        width, height = self.size.width or 80, self.size.height or 24
        key = (self._rows, width, height)
        if key == self._key:
            return False
        self._key = key
        self.mode, lines = build_lines(self._rows, width, height)
        base = self.rich_style
        strips = [Strip(segs).crop_extend(0, width, _PLAIN).apply_style(base) for segs in lines]
        old = self._strips
        self._strips = strips
        self.virtual_size = Size(width, len(strips))
        if len(old) != len(strips):
            self.refresh(layout=True)
        else:
            for y, (a, b) in enumerate(zip(old, strips, strict=True)):
                if a != b:
                    self.refresh_line(y)
        return True

    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        if 0 <= index < len(self._strips):
            return self._strips[index]
        return Strip.blank(self.size.width, self.rich_style)
