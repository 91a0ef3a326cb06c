"""The "compare with…" prompt: a saved log, a `--dump-details` directory, or a finished job's id."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class ComparePrompt(ModalScreen[str | None]):
    """Returns what was typed (stripped), or None on Esc or an empty line."""

    DEFAULT_CSS = """
    ComparePrompt { align: center middle; }
    ComparePrompt > Vertical { width: 90; max-width: 96%; height: auto; border: thick $accent;
                               background: $surface; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                "compare with… a saved Ray job log, a --dump-details directory, or a finished job's id",
                markup=False,
            )
            yield Input(placeholder="path or job id", id="compare-target")

    def on_mount(self) -> None:
        self.query_one("#compare-target", Input).focus()

    @on(Input.Submitted, "#compare-target")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
