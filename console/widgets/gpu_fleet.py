"""The GPU fleet as ONE line-API widget: a row per node, a cell per GPU.

Why one widget: 128 separate Statics, one per GPU, cost about 3x the CPU of one grid at 1 Hz.
Why line API: rows are Strips built once per snapshot and re-sent only when their content
changed, so an unchanged fleet costs no terminal bytes at all.

Each cell shows utilisation as background shading and memory as a second shade (or a glyph
height when compact). "No telemetry" (`gpus is None`) is drawn as `?`/words, never as 0%;
a dead node is marked in red with its death reason; a node whose reading is older than two reporter
periods is drawn as stale (`~`, its age), never as its last values. The header names the source of the
readings and the age of the oldest one, as of the moment it is drawn.

The layout picks the richest of three cell modes that fits the widget's height:
  full   one node per row, `util% memGiB` per GPU (16 x 8 fits 80 columns);
  medium several nodes per row, 3 chars per GPU (util digits + memory glyph);
  glyph  one character per GPU (memory glyph on utilisation shade): 1024 GPUs in 80 x 17;
  node   aggregated, one character per node (its mean), when even glyph rows do not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from backend.cluster.telemetry import ClusterSnapshot, GpuSnapshot, NodeSnapshot

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
    age_s: int | None = (
        None  # a stale row's age in whole seconds (None while fresh: a fresh row does not change as
    )
    # its reading ages, so it is not re-sent)

    @property
    def gpu_count(self) -> int:
        """The GPUs it reports, or (without telemetry) the GPUs it should have."""
        return len(self.gpus) if self.gpus is not None else self.expected_gpus


def _fresh_cells(rows: Sequence[NodeRow]) -> list[GpuCell]:
    """The cells of the rows whose reading is fresh (a stale value is no value)."""
    return [c for r in rows if r.gpus and not r.stale for c in r.gpus]


def _known_utils(cells: Sequence[GpuCell]) -> tuple[float, ...]:
    return tuple(c.util for c in cells if c.util is not None)


def _known_mems(cells: Sequence[GpuCell]) -> tuple[float, ...]:
    return tuple(f for c in cells if (f := c.mem_frac) is not None)


@dataclass(frozen=True)
class FleetHeader:
    """What the header says about the readings themselves: where they come from and how old the oldest is;
    and, where the console's probe reads a node, which processes
    hold its GPUs (drawn below the rows when room is left)."""

    sources: tuple[str, ...] = ()
    oldest_age_s: int | None = None
    holders: tuple[str, ...] = ()


def fleet_rows(
    snapshot: ClusterSnapshot | None, now: float | None = None, gpus_per_node: int = 8
) -> tuple[NodeRow, ...]:
    """Adapt a backend ClusterSnapshot to drawable rows,
    ages and staleness as of `now` (default: when taken)."""
    if snapshot is None:
        return ()
    at = snapshot.taken_at if now is None else now
    return tuple(_node_row(snapshot, node, at, gpus_per_node) for node in snapshot.nodes)


def _node_row(snapshot: ClusterSnapshot, node: NodeSnapshot, at: float, gpus_per_node: int) -> NodeRow:
    """One node's row: its cells (None without telemetry), the GPUs it should have, and its age if stale."""
    gpus = (
        None
        if node.gpus is None
        else tuple(GpuCell(g.utilization_pct, g.mem_used_mb, g.mem_total_mb) for g in node.gpus)
    )
    expected = len(gpus) if gpus else int(node.logical_gpus_total) or gpus_per_node
    note = node.gpu_note if node.alive else (node.death_reason or "dead")
    age, stale = snapshot.age_at(node, at), snapshot.stale_at(node, at)
    return NodeRow(
        node.display_name,
        node.alive,
        gpus,
        note,
        expected,
        stale,
        int(age) if stale and age is not None else None,
    )


def fleet_header(snapshot: ClusterSnapshot | None, now: float | None = None) -> FleetHeader:
    if snapshot is None:
        return FleetHeader()
    oldest = snapshot.oldest_age(snapshot.taken_at if now is None else now)
    return FleetHeader(snapshot.sources, None if oldest is None else int(oldest), gpu_holders(snapshot))


def gpu_holders(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """ "<node> g<i> pid <pid> <role> <GiB>G" for every process the probe reads holding GPU memory, biggest
    first, named by the attached job's role for it where Ray lists one (only the probe's list: Ray's
    reporter's is seconds old and, on some drivers, empty; ray.md §8)."""
    found = [
        held
        for node in snapshot.alive_nodes
        if node.gpu_source == "probe"
        for gpu in node.gpus or ()
        for held in _held_by(snapshot, node, gpu)
    ]
    return tuple(text for _, text in sorted(found, key=lambda item: -item[0]))


def _held_by(snapshot: ClusterSnapshot, node: NodeSnapshot, gpu: GpuSnapshot) -> list[tuple[int, str]]:
    """(MiB, text) for each process holding memory on one GPU."""
    label = node.display_name
    found: list[tuple[int, str]] = []
    for proc in gpu.processes:
        if proc.mem_mb > 0:
            role = snapshot.role_of(node.node_id, proc.pid)
            named = f"pid {proc.pid} {role}" if role else f"pid {proc.pid}"
            found.append((proc.mem_mb, f"{label} g{gpu.index} {named} {proc.mem_mb / 1024:.0f}G"))
    return found


def _holders_line(holders: Sequence[str], width: int) -> list[Segment]:
    """As many holders as `width` takes, then how many more; the first one at least, cut short if it must be
    (a bare "+32 more" named none of them)."""
    text = "GPU holders (probe): "
    for i, item in enumerate(holders):
        more = f" +{len(holders) - i} more"
        if len(text) + len(item) + 2 + (len(more) if i + 1 < len(holders) else 0) > width:
            if i == 0:
                rest = f" +{len(holders) - 1} more" if len(holders) > 1 else ""
                room = width - len(text) - len(rest)
                return [Segment(text + item[: max(0, room - 1)] + "…" + rest, _DIM)]
            return [Segment(text.rstrip(", ") + more, _DIM)]
        text += item + ", "
    return [Segment(text.rstrip(", "), _DIM)]


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
_GLYPH_STYLES = tuple(
    Style(color="#d0d0ff" if i < 3 else "#10203a", bgcolor=c) for i, c in enumerate(_UTIL_BG)
)


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
    return max((r.gpu_count for r in rows), default=8)


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


@dataclass(frozen=True, slots=True)
class _Counts:
    """What the header counts over the fleet's rows (a stale value is no value)."""

    total: int
    alive: int
    nodes: int
    no_telemetry: int
    stale: int
    utils: tuple[float, ...]
    mems: tuple[float, ...]

    @classmethod
    def of(cls, rows: Sequence[NodeRow]) -> _Counts:
        live = [r for r in rows if r.alive]
        gpus = _fresh_cells(live)
        return cls(
            total=sum(r.gpu_count for r in rows),
            alive=len(live),
            nodes=len(rows),
            no_telemetry=sum(1 for r in live if r.gpus is None),
            stale=sum(1 for r in live if r.stale),
            utils=_known_utils(gpus),
            mems=_known_mems(gpus),
        )

    def averages(self) -> str:
        if not self.utils:
            return ""
        mem = 100 * sum(self.mems) / max(1, len(self.mems))
        return f"  util {sum(self.utils) / len(self.utils):.0f}% mem {mem:.0f}%"


def _summary(rows: Sequence[NodeRow], mode: Mode, width: int, header: FleetHeader) -> list[Segment]:
    """The header: counts, then what the readings are worth (source and oldest age), then averages and the
    key. What does not fit `width` is left out from the least telling end; the age never is."""
    n = _Counts.of(rows)
    age = f"oldest {header.oldest_age_s}s" if header.oldest_age_s is not None else "age unknown"
    source = f"  {'+'.join(header.sources)}, {age}" if header.sources else ""
    key = {FULL: "  [util% memGiB]", NODE: "  [a node per char: shade=util glyph=mem]"}.get(
        mode, "  [shade=util glyph=mem]"
    )
    dead = n.nodes - n.alive
    # (text, style, rank): rank 0 always stays; higher ranks are dropped first when the line is too long
    parts: list[tuple[str, Style, int]] = [
        (f"{n.total} GPUs {n.alive}/{n.nodes} nodes up", _LABEL, 0),
        (n.averages(), _PLAIN, 3),
        (f"  {n.no_telemetry} no telemetry" if n.no_telemetry else "", _UNKNOWN, 2),
        (f"  {dead} dead" if dead else "", _LABEL_DEAD, 0),
        (f"  {n.stale} stale" if n.stale else "", _UNKNOWN, 0),
        (source, _UNKNOWN if n.stale else _DIM, 1),
        (key, _DIM, 4),
    ]
    return [Segment(t, st) for t, st, _ in _fit([p for p in parts if p[0]], width, source, age)]


def _fit(
    parts: list[tuple[str, Style, int]], width: int, source: str, age: str
) -> list[tuple[str, Style, int]]:
    """Drop the parts of the highest rank first until the line fits; of the source, the age stays."""
    for rank in (4, 3, 2, 1):
        if sum(len(t) for t, _, _ in parts) <= width:
            break
        if rank == 1 and source:  # keep the age, drop the source's name
            parts = [(f"  {age}", st, 0) if t == source else (t, st, r) for t, st, r in parts]
        else:
            parts = [p for p in parts if p[2] != rank]
    return parts


def _full_row(row: NodeRow, lw: int, g: int) -> list[Segment]:
    label = row.label[: lw - 1].ljust(lw)
    if not row.alive:
        return [
            Segment(("✗" + label)[:lw], _LABEL_DEAD),
            Segment(f" dead: {row.note} "[: g * FULL.cell], _DEAD),
        ]
    segs = [Segment(label, _UNKNOWN if row.stale else _LABEL)]
    if row.gpus is None or row.stale:
        text = _no_reading(row)
        segs.append(Segment(text.ljust(g * FULL.cell - 1)[: g * FULL.cell - 1], _UNKNOWN))
        return segs
    for cell in row.gpus:
        segs.extend(_full_cell(cell))
    return segs


def _full_cell(cell: GpuCell) -> tuple[Segment, Segment, Segment]:
    """`util% memGiB `: each `?` where it is unknown."""
    if cell.util is None:
        util = Segment("  ? ", _UNKNOWN)
    else:
        util = Segment(f"{cell.util:>3.0f}%", _util_style(cell.util))
    frac = cell.mem_frac
    if frac is None or cell.mem_used_mb is None:
        mem = Segment("  ?", _UNKNOWN)
    else:
        mem = Segment(f"{cell.mem_used_mb / 1024:>3.0f}"[-3:], _MEM_STYLES[_level(frac, len(_MEM_STYLES))])
    return util, mem, Segment(" ")


def _no_reading(row: NodeRow) -> str:
    """What a live row without a usable reading says instead of its cells."""
    if row.gpus is not None:
        return f" stale: last reading {_age(row)} ago "
    return f" {row.note} " if row.note else " no telemetry "


def _age(row: NodeRow) -> str:
    return f"{row.age_s}s" if row.age_s is not None else "an unknown time"


def _node_cell(row: NodeRow) -> Segment:
    """One node as one character: × dead, ? no telemetry,
    ~ stale, else mean memory glyph on mean util shade."""
    if not row.alive:
        return Segment("×", _DEAD)
    if row.stale and row.gpus is not None:
        return Segment("~", _UNKNOWN)
    utils = _known_utils(row.gpus or ())
    if row.gpus is None or not utils:
        return Segment("?", _UNKNOWN)
    mems = _known_mems(row.gpus)
    glyph = _mem_glyph(sum(mems) / len(mems) if mems else None)
    return Segment(glyph, _GLYPH_STYLES[_level(sum(utils) / len(utils) / 100.0, len(_UTIL_BG))])


def _compact_cells(row: NodeRow, mode: Mode, g: int) -> list[Segment]:
    if not row.alive:
        return [Segment("×" * (g * mode.cell), _DEAD)]
    if row.gpus is None:
        return [Segment("?" * (g * mode.cell), _UNKNOWN)]
    if row.stale:
        return [Segment("~" * (g * mode.cell), _UNKNOWN)]
    segs: list[Segment] = []
    for cell in row.gpus:
        glyph = _mem_glyph(cell.mem_frac)
        if cell.util is None:
            segs.append(
                Segment(("?" if mode is GLYPH else "?" + " " + glyph)[: mode.cell].rjust(mode.cell), _UNKNOWN)
            )
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


def build_lines(
    rows: Sequence[NodeRow], width: int, height: int, header: FleetHeader | None = None
) -> tuple[Mode, list[list[Segment]]]:
    """All lines of the fleet (header first) as segment lists; pure, so tests can read them."""
    mode, npr = plan_layout(rows, width, height)
    lines: list[list[Segment]] = [_summary(rows, mode, width, header or FleetHeader())]
    if not rows:
        lines.append([Segment("no nodes reported yet", _DIM)])
    elif mode is FULL:
        lines.extend(_full_lines(rows, width, height - 1, header))
    elif mode is NODE:
        lines.extend(_node_lines(rows, npr))
    else:
        lines.extend(_compact_lines(rows, mode, npr))
    return mode, lines


def _full_lines(
    rows: Sequence[NodeRow], width: int, room: int, header: FleetHeader | None
) -> list[list[Segment]]:
    """A row per node, then the holders line if a row of `room` is left over."""
    lw, g = _label_width(rows), _gpus_per_node(rows)
    lines = [_full_row(r, lw, g) for r in rows]
    if header is not None and header.holders and len(lines) < room:
        lines.append(_holders_line(header.holders, width))
    return lines


def _node_lines(rows: Sequence[NodeRow], npr: int) -> list[list[Segment]]:
    """`npr` nodes a line, one character each, a space every 8."""
    iw = _index_width(len(rows))
    lines: list[list[Segment]] = []
    for start in range(0, len(rows), npr):
        segs = [Segment(f"{start:>{iw}} ", _DIM)]
        for j, row in enumerate(rows[start : start + npr]):
            if j and j % 8 == 0:
                segs.append(Segment(" "))
            segs.append(_node_cell(row))
        lines.append(segs)
    return lines


def _compact_lines(rows: Sequence[NodeRow], mode: Mode, npr: int) -> list[list[Segment]]:
    """`npr` node blocks a line: a glyph line opens with its first node's index, medium blocks with theirs."""
    iw, g = _index_width(len(rows)), _gpus_per_node(rows)
    lines: list[list[Segment]] = []
    for start in range(0, len(rows), npr):
        segs = [Segment(f"{start:>{iw}} ", _DIM)] if mode is GLYPH else []
        for j, row in enumerate(rows[start : start + npr]):
            if mode is MEDIUM:
                style = _LABEL_DEAD if not row.alive else _DIM
                segs.append(Segment(f"n{start + j:<{iw}} ", style))
            segs.extend(_compact_cells(row, mode, g))
            segs.append(Segment(" "))
        lines.append(segs)
    return lines


# ---------------------------------------------------------------- the widget


class GpuFleet(ScrollView, can_focus=False):
    """Draws a ClusterSnapshot; `update_snapshot` repaints only the rows whose content changed."""

    DEFAULT_CSS = """
    GpuFleet { height: 1fr; min-height: 3; overflow-x: hidden; }
    """

    def __init__(
        self,
        *,
        max_share: float = 1.0,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.max_share = max_share  # with `height: auto`: the part of the parent's height it may take
        self._rows: tuple[NodeRow, ...] = ()
        self._strips: list[Strip] = []
        self._header = FleetHeader()
        self._key: tuple[tuple[NodeRow, ...], FleetHeader, int, int] | None = None
        self.mode: Mode = FULL
        self._wanted = -1  # the height last asked for (see _check_height)
        self._shape: tuple[int | bool, ...] = ()

    @property
    def rows(self) -> tuple[NodeRow, ...]:
        return self._rows

    def update_snapshot(self, snapshot: ClusterSnapshot | None, now: float | None = None) -> bool:
        """Take a new snapshot (ages as of `now`, default when
        it was taken); True if anything on screen changed."""
        rows, header = fleet_rows(snapshot, now), fleet_header(snapshot, now)
        if rows == self._rows and header == self._header and self._strips:
            return False
        self._rows, self._header = rows, header
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
        holders = bool(self._header.holders)  # a holders line below the rows, where room is left
        shape = (len(rows), _gpus_per_node(rows), _label_width(rows), self.size.width, room, holders)
        if shape == self._shape:
            return
        self._shape = shape
        wanted = min(len(build_lines(rows, self.size.width or 80, room, self._header)[1]), room)
        if wanted != self._wanted:
            self._wanted = wanted
            self.refresh(layout=True)

    def on_resize(self) -> None:
        self._rebuild()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As tall as the richest layout that fits `max_share` of the room offered (`height: auto`)."""
        _, lines = build_lines(
            self._rows, width or 80, max(3, int(container.height * self.max_share)), self._header
        )
        return min(len(lines), max(3, int(container.height * self.max_share)))

    def _rebuild(self) -> bool:
        width, height = self.size.width or 80, self.size.height or 24
        key = (self._rows, self._header, width, height)
        if key == self._key:
            return False
        self._key = key
        self.mode, lines = build_lines(self._rows, width, height, self._header)
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
