"""A one-line prompt (the Logs view's search / filter / jump) under the console's key rule.

Its keys are what an Input edits with: every printable character, its own line-editing bindings, Esc (the
view cancels the prompt). Any other key a binding holds (Down, PgDn, Tab, ctrl+p, ...) submits what was
typed first, then reaches its action (console/key_order.py).
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input

INPUT_KEYS = frozenset(k.strip() for b in Input.BINDINGS for k in getattr(b, "key", "").split(","))


class Prompt(Input):
    """An Input that commits (posts Submitted) when a binding's key arrives."""

    def takes(self, event: events.Key) -> bool:
        return event.is_printable or event.key in INPUT_KEYS or event.key == "escape"

    def commit(self) -> None:
        self.post_message(self.Submitted(self, self.value))
