"""What every top-level view shares: its keymap scope and the read-only refusal.

A view subclasses `ConsoleView`, sets `SCOPE` (its keymap scope, e.g. "run") and
`BINDINGS = keymap.bindings_for(SCOPE)`. Actions marked `mutates=True` in the keymap are hidden
(footer, palette) and refused while the app is read-only, with no code in the view.
"""

from __future__ import annotations

from typing import cast

from textual.widget import Widget

from console import keymap
from console.host import ConsoleHost


class ConsoleView(Widget, can_focus=True):
    """A pane of the app's ContentSwitcher."""

    SCOPE = ""
    DEFAULT_CSS = """
    ConsoleView { height: 1fr; }
    ConsoleView:focus { background-tint: $foreground 0%; }
    """

    @property
    def console(self) -> ConsoleHost:
        """The app this view lives in (views are mounted only by UltraConsoleApp, a ConsoleHost)."""
        return cast("ConsoleHost", self.app)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in keymap.mutating_actions(self.SCOPE) and self.console.readonly:
            return False
        return True

    def refusal(self, action: str) -> str | None:
        """Why `action`, enabled by its `check_action` only for show (None: dimmed) or hidden by it (a
        read-only console's launch, abort, cleanup), is refused now: pressing its key says so in one line
        (console/key_order.py) instead of doing nothing."""
        if action in keymap.mutating_actions(self.SCOPE) and self.console.readonly:
            return f"read-only console (--readonly): {action.replace('_', ' ')} is refused"
        return None

    def refuse_if_readonly(self, what: str) -> bool:
        """True (and a one-line warning) when `what` must not run because the app is read-only."""
        if self.console.readonly:
            self.notify(f"read-only console: {what} is refused", severity="warning")
            return True
        return False

    def view_shown(self) -> None:
        """Called by the app each time this view becomes the visible one (cheap; may refresh)."""
