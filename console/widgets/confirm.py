"""A yes/no modal whose safe answer (Cancel) has focus, for launch (and anything else irreversible).

Esc and Cancel answer False; only an explicit Tab/arrow to the action button and Enter answers True
(harlequin's ConfirmModal habit: the destructive choice is never the default).
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmModal(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmModal { align: center middle; }
    ConfirmModal > Vertical { width: 90; max-width: 95%; height: auto; max-height: 90%;
                              border: thick $warning; background: $surface; padding: 0 1; }
    ConfirmModal .title { text-style: bold; padding-bottom: 1; }
    ConfirmModal VerticalScroll { height: auto; max-height: 24; }
    ConfirmModal .buttons { height: auto; align-horizontal: right; padding-top: 1; }
    ConfirmModal Button { margin-left: 2; min-width: 12; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", show=True),
        Binding("left,right", "app.focus_next", "Switch", show=False),
    ]

    def __init__(self, title: str, body: Any, confirm_label: str, *, confirm_variant: str = "error") -> None:
        super().__init__()
        self._title = title
        self._body = body
        self._confirm_label = confirm_label
        self._variant = confirm_variant

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, classes="title", markup=False)
            with VerticalScroll():
                yield Static(self._body, classes="body")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="default")
                yield Button(self._confirm_label, id="confirm", variant=self._variant)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def action_cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        self.dismiss(True)
