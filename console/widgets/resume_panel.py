"""The Plan view's resume panel: which run is resumed, the proposed fix as a field-by-field diff the operator
accepts or drops (space toggles), the checkpoint and the advice. A leaf: it shows what it is given and says
which fields are accepted (Toggled); the Plan view applies them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import SelectionList, Static

from backend.sanitize import one_line


class ResumePanel(Vertical):
    DEFAULT_CSS: ClassVar[str] = """
    ResumePanel { height: auto; display: none; border-left: thick $warning; padding-left: 1; }
    ResumePanel #resume-head { height: auto; }
    ResumePanel SelectionList { height: auto; max-height: 8; }
    """

    class Toggled(Message):
        """The fields whose proposed edit is accepted now."""

        def __init__(self, accepted: frozenset[str]) -> None:
            super().__init__()
            self.accepted = accepted

    def compose(self) -> ComposeResult:
        yield Static("", id="resume-head", markup=False)
        yield SelectionList[str](id="resume-edits")
        yield Static("", id="resume-tail", markup=False)

    def show(self, head: Sequence[str], edits: Iterable[tuple[str, str, bool]], tail: Sequence[str]) -> None:
        """head/tail: lines above and below the diff; edits: (label, field, accepted)."""
        self.query_one("#resume-head", Static).update(Text("\n".join(one_line(t) for t in head)))
        self.query_one("#resume-tail", Static).update(Text("\n".join(one_line(t) for t in tail)))
        picks: SelectionList[str] = self.query_one("#resume-edits", SelectionList)
        rows = [(Text(one_line(label)), field, accepted) for label, field, accepted in edits]
        current = [picks.get_option_at_index(i).value for i in range(picks.option_count)]
        if current == [field for _, field, _ in rows]:  # the same diff: only what is ticked changed
            for _, field, accepted in rows:
                (picks.select if accepted else picks.deselect)(field)
        else:
            picks.clear_options()
            picks.add_options(rows)
        picks.display = bool(rows)
        self.display = True

    def hide(self) -> None:
        self.display = False

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged[str]) -> None:
        event.stop()
        self.post_message(self.Toggled(frozenset(event.selection_list.selected)))
