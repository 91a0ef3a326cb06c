"""The Samples screen (G in the Run view): the GRPO groups of one rollout, and a group's samples.

A table per rollout (group, n, rewards, mean/std, zero-std, truncated, response length min/mean/max, weight
versions, prompt head), sortable (s) and filtered (z: zero-std only, t: truncated only); `[` `]` step the
rollout (and move the app's rollout cursor, the charts' one); Enter opens a group: its samples, and the one
highlighted in full (prompt, then response with its `</think>` boundary marked, status, reward, length, the
advantage it trained on); a reward-vs-length plot beside the table on a wide terminal (p toggles it).

Files are read by backend.signals.rollout_data in a thread worker (a full rollout is ~0.5 s); the text is
sanitised there, and every cell here is a rich Text (never markup), so nothing a sample holds reaches the
terminal as an escape sequence or as markup. New rollout files are looked for every few seconds: a screen on
the newest rollout moves to a newer one when it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from backend.signals.grpo_groups import (
    GROUP_COLUMNS,
    GroupStats,
    RolloutGroups,
    group_row,
    grouped,
    reward_digits,
    rollout_groups,
    rollout_line,
    think_split,
)
from backend.signals.rollout_data import RolloutSamples, RolloutShelf, Sample
from console import keymap

WATCH_S = 3.0  # how often the screen looks for a new rollout file
WIDE_FROM = 120  # columns from which the plot stands beside the table
PROMPT_SHOWN = 4000  # characters of a prompt shown above a response (its end: where the question is)
SORTS: tuple[tuple[str, Callable[[GroupStats], object]], ...] = (
    ("group", lambda g: g.group_index),
    ("mean reward", lambda g: (g.mean is None, -(g.mean or 0.0))),
    ("std", lambda g: (g.std is None, g.std or 0.0)),
    ("mean length", lambda g: -g.len_mean),
    ("truncated", lambda g: -g.truncated),
)
SAMPLE_COLUMNS = ("#", "status", "reward", "adv", "len", "ver", "response (end)")


class SamplesLoaded(Message):
    def __init__(
        self, name: str, rollout: RolloutSamples | None, groups: RolloutGroups | None, note: str
    ) -> None:
        super().__init__()
        self.name, self.rollout, self.groups, self.note = name, rollout, groups, note


class FilesListed(Message):
    def __init__(self, names: list[str], first: bool) -> None:
        super().__init__()
        self.names, self.first = names, first


@dataclass(frozen=True)
class Filters:
    zero_only: bool = False
    truncated_only: bool = False
    sort: int = 0

    def keep(self, group: GroupStats) -> bool:
        return (not self.zero_only or group.zero_std) and (not self.truncated_only or group.truncated > 0)

    def text(self) -> str:
        shown = [
            n for on, n in ((self.zero_only, "zero-std only"), (self.truncated_only, "truncated only")) if on
        ]
        return f"sorted by {SORTS[self.sort][0]}" + (f" · {', '.join(shown)}" if shown else "")


def scatter(samples: Sequence[Sample], width: int, height: int) -> Text:
    """Reward (rows, top = highest) against response length (columns): `o` a sample, `x` a truncated one
    (red), a digit where several share a cell."""
    width, height = max(8, width), max(3, height)
    rewards = [s.reward for s in samples if s.reward is not None]
    if not rewards:
        return Text("no rewards to plot", style="dim")
    low, high = min(rewards), max(rewards)
    longest = max((s.response_length for s in samples), default=1) or 1
    cells = _scatter_cells(samples, (width, height), (low, high), longest)
    text = Text("reward vs response length\n", style="bold")
    for row in range(height):
        text.append(_scatter_label(row, height, low, high), "dim")
        for col in range(width):
            text.append(*_scatter_mark(cells.get((row, col)), row == height - 1))
        text.append("\n")
    text.append(f"      0 … {longest} tokens (x truncated)", "dim")
    return text


def _scatter_cells(
    samples: Sequence[Sample], size: tuple[int, int], span: tuple[float, float], longest: int
) -> dict[tuple[int, int], list[bool]]:
    """(row, col) -> the truncated flag of each rewarded sample that falls in that cell."""
    (width, height), (low, high) = size, span
    cells: dict[tuple[int, int], list[bool]] = {}
    for s in samples:
        if s.reward is None:
            continue
        row = 0 if high == low else round((high - s.reward) / (high - low) * (height - 1))
        col = min(width - 1, s.response_length * (width - 1) // longest)
        cells.setdefault((row, col), []).append(s.truncated)
    return cells


def _scatter_label(row: int, height: int, low: float, high: float) -> str:
    """The reward axis: the top and bottom rows' rewards (every row's, the one reward, when all are equal)."""
    if high == low:
        return f"{high:>5.2f} "
    if row in (0, height - 1):
        return f"{high - (high - low) * row / (height - 1):>5.2f} "
    return "      "


def _scatter_mark(hits: list[bool] | None, bottom: bool) -> tuple[str, str]:
    """(character, style) of one cell: empty, one sample (o, or x truncated) or how many share it."""
    if not hits:
        return ("·" if bottom else " "), "dim"
    if len(hits) > 1:
        return str(min(9, len(hits))), "bold red" if any(hits) else "bold"
    return ("x", "red") if hits[0] else ("o", "green")


def sample_text(sample: Sample, advantage: float | None, prompt: str) -> Text:
    """One sample in full: its numbers, the prompt's end, the response with the `</think>` boundary marked."""
    reward = "—" if sample.reward is None else f"{sample.reward:g}"
    adv = "—" if advantage is None else f"{advantage:+.3f}"
    text = Text()
    text.append(f"sample #{sample.index} · {sample.status} · reward {reward} · advantage {adv} · ", "bold")
    text.append(f"{sample.response_length} tokens (prompt {sample.prompt_length})", "bold")
    if sample.weight_versions:
        text.append(f" · weights {','.join(sample.weight_versions)}", "bold")
    if sample.label:
        text.append(f" · label {sample.label[:80]}", "bold")
    text.append("\n── prompt (end) ──\n", "cyan")
    text.append(prompt[-PROMPT_SHOWN:], "dim")
    text.append("\n── response ──\n", "cyan")
    parts = think_split(sample.response)
    if parts is None:
        text.append(sample.response)
        text.append("\n── no </think>: the response never reached its answer ──", "yellow")
        return text
    reasoning, answer = parts
    text.append(reasoning, "dim")
    text.append("\n──── </think> ────\n", "bold magenta")
    text.append(answer)
    return text


def _group_style(group: GroupStats) -> str:
    """Red: zero-std (no gradient); yellow: some sample truncated."""
    if group.zero_std:
        return "red"
    return "yellow" if group.truncated else ""


def _member_cells(sample: Sample, adv: float | None) -> tuple[str, ...]:
    """One sample of an open group as the members table's cells (SAMPLE_COLUMNS)."""
    return (
        str(sample.index),
        sample.status,
        reward_digits([sample.reward]),
        "—" if adv is None else f"{adv:+.2f}",
        str(sample.response_length),
        ",".join(sample.weight_versions)[:8],
        " ".join(sample.response[-200:].split()),
    )


def _group_head(rollout: str, stats: GroupStats) -> str:
    """The head over an open group: its size, rewards, mean, zero-std, then its prompt's start."""
    mean = "—" if stats.mean is None else f"{stats.mean:.3f}"
    zero = " · zero-std: no gradient" if stats.zero_std else ""
    return (
        f"rollout {rollout} · group {stats.group_index}: {stats.n} samples, rewards "
        f"{reward_digits(stats.rewards)}, mean {mean}{zero} — Esc: back\n{stats.prompt_head}"
    )


class SamplesScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    SamplesScreen { align: center middle; }
    SamplesScreen > Vertical { width: 100%; height: 100%; background: $surface; }
    SamplesScreen #samples-head { height: auto; max-height: 3; padding: 0 1; text-style: bold; }
    SamplesScreen #samples-main { height: 1fr; }
    SamplesScreen #samples-groups { width: 1fr; height: 1fr; }
    SamplesScreen #samples-plot { width: 44; height: 1fr; border-left: solid $primary-darken-2;
                                  padding: 0 1; }
    SamplesScreen #samples-members { height: auto; max-height: 12; }
    SamplesScreen #samples-detail { height: 1fr; border-top: solid $primary-darken-2; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = keymap.bindings_for("samples")

    def __init__(
        self, shelf: RolloutShelf, start: str | None = None, on_rollout: Callable[[int], None] | None = None
    ) -> None:
        super().__init__()
        self.shelf = shelf
        self.name_shown: str | None = start
        self.on_rollout = on_rollout
        self.rollout: RolloutSamples | None = None
        self.groups: RolloutGroups | None = None
        self.filters = Filters()
        self.open_group: int | None = None
        self.plot_on = True  # beside the table on a wide terminal
        self.plot_narrow = False  # instead of the table on a narrow one
        self._names: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", id="samples-head", markup=False)
            with Horizontal(id="samples-main"):
                yield DataTable(id="samples-groups", cursor_type="row", zebra_stripes=True)
                yield Static("", id="samples-plot", markup=False)
            yield DataTable(id="samples-members", cursor_type="row")
            with VerticalScroll(id="samples-detail"):
                yield Static("", id="samples-sample", markup=False)

    def on_mount(self) -> None:
        self.query_one("#samples-groups", DataTable).add_columns(*GROUP_COLUMNS)
        self.query_one("#samples-members", DataTable).add_columns(*SAMPLE_COLUMNS)
        self._show_mode()
        self._head(f"looking for rollout files in {self.shelf.dump_dir}…")
        self._list(first=True)
        self.set_interval(WATCH_S, self._list)
        self.query_one("#samples-groups", DataTable).focus()

    @work(thread=True, group="samples-list", exit_on_error=False)
    def _list(self, first: bool = False) -> None:
        """The rollout files (a directory listing: off the UI thread, the dump may be on network storage)."""
        self.post_message(FilesListed([f.name for f in self.shelf.files()], first))

    def on_files_listed(self, message: FilesListed) -> None:
        if message.first:
            self._first(message.names)
        else:
            self._watch(message.names)

    def _first(self, names: list[str]) -> None:
        self._names = names
        train = self._train(names)
        if self.name_shown not in names:
            self.name_shown = train[-1] if train else (names[-1] if names else None)
        if self.name_shown is None:
            self._head(
                f"no rollout file yet in {self.shelf.dump_dir}/rollout_data (miles writes one per rollout)"
            )
        else:
            self._load(self.name_shown)

    # ------------------------------------------------------------ loading
    def _head(self, line: str) -> None:
        self.query_one("#samples-head", Static).update(Text(line))

    @work(thread=True, exclusive=True, group="samples", exit_on_error=False)
    def _load(self, name: str) -> None:
        rollout = self.shelf.open(name)
        groups = rollout_groups(rollout) if rollout is not None else None
        self.post_message(SamplesLoaded(name, rollout, groups, self.shelf.note(name)))

    def on_samples_loaded(self, message: SamplesLoaded) -> None:
        if message.name != self.name_shown:
            return
        self.rollout, self.groups = message.rollout, message.groups
        if message.rollout is None:
            self._head(f"rollout {message.name}: {message.note or 'not readable'} — [ ] for another")
        self.open_group = None
        self._show_mode()
        self._fill_groups()

    def _watch(self, names: list[str]) -> None:
        """A new rollout file: the list grows; a screen on the newest follows it; a file still being written
        (not shown yet) is read again."""
        retry = self._retry()
        if names == self._names and not retry:
            return
        following = self._following()
        self._names = names
        newest = self._train(names)
        if not newest or self.open_group is not None or not following:
            return
        if newest[-1] != self.name_shown or retry:
            self.name_shown = newest[-1]
            self._load(newest[-1])

    def _retry(self) -> bool:
        """The file shown could not be read yet (still being written): read it again."""
        return self.rollout is None and self.name_shown is not None and self._waiting(self.name_shown)

    def _following(self) -> bool:
        """The screen shows the newest training rollout (or none yet), so a newer one replaces it."""
        before = self._train(self._names)
        return not before or self.name_shown in (None, before[-1])

    def _waiting(self, name: str) -> bool:
        return self.shelf.state(name) in ("pending", "unread")

    @staticmethod
    def _train(names: list[str]) -> list[str]:
        return [n for n in names if not n.startswith("eval_")]

    # ------------------------------------------------------------ drawing
    def _show_mode(self) -> None:
        grouped_mode = self.open_group is None
        wide = self.app.size.width >= WIDE_FROM
        plot = self.query_one("#samples-plot")
        self.query_one("#samples-main").display = grouped_mode
        # wide: the plot beside the table (p hides it); narrow: p shows the plot instead of the table
        self.query_one("#samples-groups").display = wide or not self.plot_narrow
        plot.display = grouped_mode and (self.plot_on if wide else self.plot_narrow)
        plot.styles.width = 44 if wide else "1fr"
        self.query_one("#samples-members").display = not grouped_mode
        self.query_one("#samples-detail").display = not grouped_mode

    def _fill_groups(self) -> None:
        table = self.query_one("#samples-groups", DataTable)
        table.clear()
        groups = self.groups
        if groups is None:
            return
        shown = sorted((g for g in groups.groups if self.filters.keep(g)), key=SORTS[self.filters.sort][1])  # type: ignore[arg-type]
        for g in shown:
            style = _group_style(g)
            table.add_row(
                *(Text(cell, style=style, no_wrap=True, overflow="ellipsis") for cell in group_row(g)),
                key=str(g.group_index),
            )
        position = self._names.index(groups.name) + 1 if groups.name in self._names else 0
        self._head(
            f"{rollout_line(groups)}\nEnter samples · z zero-std · t truncated · s sort · p plot · "
            f"[ ] rollout ({position} of {len(self._names)}) · {len(shown)} of {len(groups.groups)} "
            f"groups shown, {self.filters.text()}"
        )
        if self.rollout is not None:
            self._plot(self.rollout)

    def _plot(self, rollout: RolloutSamples) -> None:
        """The scatter, sized for the plot pane (beside the table when wide, instead of it when narrow)."""
        size = self.app.size
        width = 34 if size.width >= WIDE_FROM else max(20, size.width - 12)
        self.query_one("#samples-plot", Static).update(
            scatter(rollout.samples, width, max(4, min(16, size.height - 12)))
        )

    def _fill_members(self) -> None:
        if self.rollout is None or self.groups is None or self.open_group is None:
            return
        members = grouped(self.rollout).get(self.open_group, [])
        stats = next(g for g in self.groups.groups if g.group_index == self.open_group)
        table = self.query_one("#samples-members", DataTable)
        table.clear()
        for s, adv in zip(members, stats.advantages, strict=True):
            style = "yellow" if s.truncated else ""
            table.add_row(
                *(Text(c, style=style, no_wrap=True, overflow="ellipsis") for c in _member_cells(s, adv)),
                key=str(s.index),
            )
        self._head(_group_head(self.groups.name, stats))
        table.focus()
        self._show_sample(0)

    def _show_sample(self, row: int) -> None:
        if self.rollout is None or self.groups is None or self.open_group is None:
            return
        members = grouped(self.rollout).get(self.open_group, [])
        if not members:
            return
        stats = next(g for g in self.groups.groups if g.group_index == self.open_group)
        row = max(0, min(row, len(members) - 1))
        prompt = self.rollout.prompts.get(self.open_group, "")
        self.query_one("#samples-sample", Static).update(
            sample_text(members[row], stats.advantages[row], prompt)
        )
        self.query_one("#samples-detail", VerticalScroll).scroll_home(animate=False)

    # ------------------------------------------------------------ events and actions
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "samples-groups" and event.row_key.value is not None:
            self._open(int(event.row_key.value))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "samples-members":
            self._show_sample(event.cursor_row)

    def _open(self, group_index: int) -> None:
        self.open_group = group_index
        self._show_mode()
        self._fill_members()

    def action_open(self) -> None:
        table = self.query_one("#samples-groups", DataTable)
        if self.open_group is None and self.groups is not None and table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            if key is not None:
                self._open(int(key))

    def action_back(self) -> None:
        if self.open_group is not None:
            self.open_group = None
            self._show_mode()
            self._fill_groups()
            self.query_one("#samples-groups", DataTable).focus()
            return
        self.dismiss(None)

    def action_flip(self, what: str) -> None:
        if what == "zero":
            self.filters = Filters(not self.filters.zero_only, self.filters.truncated_only, self.filters.sort)
        elif what == "truncated":
            self.filters = Filters(self.filters.zero_only, not self.filters.truncated_only, self.filters.sort)
        elif what == "sort":
            self.filters = Filters(
                self.filters.zero_only, self.filters.truncated_only, (self.filters.sort + 1) % len(SORTS)
            )
        elif what == "plot":
            if self.app.size.width >= WIDE_FROM:
                self.plot_on = not self.plot_on
            else:
                self.plot_narrow = not self.plot_narrow
            self._show_mode()
        if self.open_group is None:
            self._fill_groups()

    def action_rollout(self, delta: int) -> None:
        names = self._names
        if not names:
            return
        at = names.index(self.name_shown) if self.name_shown in names else len(names) - 1
        target = names[max(0, min(len(names) - 1, at + delta))]
        if target == self.name_shown and self.rollout is not None:
            self.notify("no rollout file further that way", timeout=2)
            return
        self.name_shown = target
        self._head(f"reading rollout {target}…")
        self._load(target)
        if self.on_rollout is not None and not target.startswith("eval_"):
            self.on_rollout(int(target))
