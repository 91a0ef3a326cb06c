"""The `?` screen: every key (as remapped) from the keymap table, plus SSH/terminal tips."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console import keymap

SSH_TIPS: tuple[tuple[str, str], ...] = (
    (
        "Colours",
        "Truecolor needs COLORTERM=truecolor on the head (ssh does not forward it: "
        "`SendEnv COLORTERM` locally + `AcceptEnv COLORTERM` in sshd, or export it). "
        "TERM=*-256color gives 256 colours, otherwise 16; TEXTUAL_COLOR_SYSTEM forces one.",
    ),
    (
        "tmux",
        "Run the console inside tmux so an SSH drop never matters; `set -sg escape-time 10` "
        "makes Esc respond at once; `set -g set-clipboard on` lets copies reach your clipboard.",
    ),
    (
        "Selecting text",
        "The app owns the mouse: hold Shift (Option in iTerm2) while dragging to select with your terminal.",
    ),
    (
        "Copying",
        "c copies the command (and y/c the current line in views) with OSC 52: it works over "
        "SSH when your terminal allows clipboard writes (not macOS Terminal).",
    ),
    (
        "Leaving",
        "q (or ctrl+q) closes the console only; the run keeps going on Ray and "
        "`ultra-console` attaches again. Abort is a separate, confirmed action.",
    ),
    ("Read-only", "--readonly hides and refuses launch, abort and cleanup: safe for spectators."),
)

_KEY_NAMES = {
    "question_mark": "?",
    "escape": "Esc",
    "slash": "/",
    "shift+tab": "Shift+Tab",
    "tab": "Tab",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
}


def key_label(key: str) -> str:
    return ", ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in key.split(","))


def keys_table(remap: Mapping[str, str], readonly: bool) -> Table:
    table = Table(box=None, padding=(0, 2), show_header=True, header_style="bold")
    table.add_column("where", style="dim", no_wrap=True)
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("does")
    table.add_column("id", style="dim", no_wrap=True)
    for spec in keymap.specs():
        if readonly and spec.mutates:
            continue
        where = keymap.scope_of(spec.id) or ""
        table.add_row(where, key_label(keymap.effective_key(spec, remap)), spec.description, spec.id)
    return table


def tips_text() -> Text:
    text = Text()
    for title, body in SSH_TIPS:
        text.append(f"{title}: ", "bold").append(body + "\n")
    text.rstrip()
    return text


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 100; max-width: 96%; height: 90%; border: thick $accent;
                            background: $surface; padding: 0 1; }
    HelpScreen .title { text-style: bold; height: 1; }
    HelpScreen VerticalScroll { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close", show=True),
    ]

    def __init__(self, remap: Mapping[str, str], readonly: bool) -> None:
        super().__init__()
        self._remap = dict(remap)
        self._readonly = readonly

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                "ultra-console — keys (remap by id in the settings file [keys]) · Esc closes",
                classes="title",
                markup=False,
            )
            with VerticalScroll(can_focus=True):
                yield Static(
                    Group(
                        keys_table(self._remap, self._readonly),
                        Text(""),
                        Text("Over SSH", style="bold underline"),
                        tips_text(),
                    )
                )

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
