"""The stacks screen (S in the run view, or the hang alert's offer): every process of the run, its Python
stack, grouped, the smallest groups first; Enter opens a
group's full stack; the path of the saved dump is shown.

The work is backend.cluster.stacks' (one node-pinned py-spy job per node), in a worker that posts messages;
this screen only draws what came back, already sanitised there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from backend.errors import ConsoleError
from backend.redaction import public_line
from console import keymap

if TYPE_CHECKING:
    from backend.cluster.stack_groups import StackGroup, StacksReport

Collect = Callable[[Callable[[str], None]], Awaitable["StacksReport"]]  # given a progress callback


class StacksProgress(Message):
    """A line of the dump's progress (nodes asked, each node's answer as it comes)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class StacksDone(Message):
    def __init__(self, report: StacksReport | None, error: str = "") -> None:
        super().__init__()
        self.report = report
        self.error = error


def group_text(group: StackGroup) -> Text:
    """A group opened: who is in it, then the first member's whole stack (the others' are the same)."""
    text = Text()
    text.append(group.line(members_shown=0) + "\n", "bold")
    for proc in group.processes[:64]:
        text.append(f"  {proc.who()}\n", "dim")
    if group.size > 64:
        text.append(f"  … and {group.size - 64} more\n", "dim")
    text.append("\n" + group.processes[0].text())
    return text


class StacksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > Vertical { width: 96%; height: 94%; border: round $accent; background: $surface; }
    StacksScreen #stacks-summary { height: auto; text-style: bold; padding: 0 1; }
    StacksScreen OptionList { height: 2fr; min-height: 3; border: none; }
    StacksScreen #stacks-detail { height: 3fr; border-top: solid $primary-darken-2; padding: 0 1; }
    StacksScreen #stacks-saved { height: 1; color: $text-muted; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = keymap.bindings_for("stacks")

    def __init__(self, job_id: str, collect: Collect) -> None:
        super().__init__()
        self.job_id, self.collect = job_id, collect
        self.report: StacksReport | None = None
        self.running = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", id="stacks-summary", markup=False)
            yield OptionList(id="stacks-groups")
            with VerticalScroll(id="stacks-detail"):
                yield Static("", id="stacks-stack", markup=False)
            yield Static("", id="stacks-saved", markup=False)

    def on_mount(self) -> None:
        self.action_again()

    def action_again(self) -> None:
        if self.running:
            self.notify("the stacks are still being dumped", severity="warning")
            return
        self.running = True
        self.query_one("#stacks-summary", Static).update(
            f"dumping the Python stack of every process of {self.job_id} on every node it runs on…"
        )
        self._run()

    @work(exclusive=True, group="stacks", exit_on_error=False)
    async def _run(self) -> None:
        try:
            report = await self.collect(self._said)
        except ConsoleError as err:
            self.post_message(StacksDone(None, f"stacks could not be read: {public_line(str(err))}"))
            return
        self.post_message(StacksDone(report))

    def _said(self, line: str) -> None:
        self.post_message(StacksProgress(line))

    def on_stacks_progress(self, message: StacksProgress) -> None:
        if self.running:
            self.query_one("#stacks-summary", Static).update(
                f"dumping the stacks of {self.job_id}: {public_line(message.line)}"
            )

    def on_stacks_done(self, message: StacksDone) -> None:
        self.running = False
        summary = self.query_one("#stacks-summary", Static)
        groups = self.query_one(OptionList)
        groups.clear_options()
        if message.report is None:
            summary.update(message.error)
            return
        report = self.report = message.report
        summary.update(f"{report.job}: {report.summary()} — the smallest groups first")
        groups.add_options(
            [
                Option(Text(g.line(), no_wrap=True, overflow="ellipsis"), id=f"g{i}")
                for i, g in enumerate(report.groups)
            ]
        )
        problems = [
            line for line in report.lines() if not line.startswith(tuple(g.line() for g in report.groups))
        ]
        groups.add_options(
            [
                Option(Text(line, style="yellow", no_wrap=True, overflow="ellipsis"), disabled=True)
                for line in problems
            ]
        )
        self.query_one("#stacks-saved", Static).update(
            f"every stack saved to {report.saved_to}" if report.saved_to else ""
        )
        if report.groups:
            groups.highlighted = 0
            self.action_open_group()
        groups.focus()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.action_open_group()

    def action_open_group(self) -> None:
        groups = self.query_one(OptionList)
        if self.report is None or groups.highlighted is None:
            return
        oid = groups.get_option_at_index(groups.highlighted).id or ""
        if oid.startswith("g"):
            self.query_one("#stacks-stack", Static).update(group_text(self.report.groups[int(oid[1:])]))

    def action_close(self) -> None:
        self.dismiss(None)
