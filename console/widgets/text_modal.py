"""A read-only modal that shows one long text whole (an Events entry cut at the terminal's width), wrapped and
scrollable; Esc or Enter closes it. The text is drawn without markup: it may hold a log's words."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class TextModal(ModalScreen[None]):
    DEFAULT_CSS = """
    TextModal { align: center middle; }
    TextModal > Vertical { width: 100; max-width: 95%; height: auto; max-height: 90%;
                           border: thick $accent; background: $surface; padding: 0 1; }
    TextModal .title { text-style: bold; padding-bottom: 1; }
    TextModal VerticalScroll { height: auto; max-height: 30; }
    TextModal .hint { color: $text-muted; padding-top: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", show=True),
    ]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self._title = title
        self._body = body

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, classes="title", markup=False)
            with VerticalScroll():
                yield Static(self._body, id="text-body", markup=False)
            yield Static("Esc or Enter closes · c in Events copies it", classes="hint", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
