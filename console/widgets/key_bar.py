"""The footer: the keys that act now, drawn as one line by one widget.

Textual's Footer mounts a widget per key and recomposes them all whenever the bindings change (each
focus move); this bar re-renders one line instead, which keeps the first frame and focus moves cheap.
Keys an action's check refuses for now (`check_action` -> None) are dimmed; the palette key sits at the
right edge, and keys that do not fit end in "…" rather than pushing it off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.widget import Widget


class KeyBar(Widget):
    """One line of `key description` pairs from the focused screen's active bindings."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"key-bar--key", "key-bar--description", "key-bar--disabled"}
    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $footer-background; color: $footer-foreground; }
    KeyBar > .key-bar--key {
        color: $footer-key-foreground; background: $footer-key-background; text-style: bold;
    }
    KeyBar > .key-bar--description { color: $footer-description-foreground; }
    KeyBar > .key-bar--disabled { color: $text-disabled; }
    """

    def __init__(self, on_first_render: Callable[[], object] | None = None, **kwargs: Any) -> None:
        """on_first_render: called once, after the first frame holding the keys is on the terminal."""
        super().__init__(**kwargs)
        self._on_first_render = on_first_render
        self._spans: list[tuple[int, int, str]] = []  # (start, end, key) of each drawn key, for clicks

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        if self._on_first_render is not None:
            self.call_after_refresh(self._on_first_render)

    def _bindings_changed(self, _screen: object) -> None:
        self.refresh()

    def _entries(self) -> tuple[list[tuple[str, str, str, bool]], tuple[str, str, str, bool] | None]:
        """(key, shown key, description, enabled) of the shown bindings, and the palette's."""
        app = self.app
        entries: list[tuple[str, str, str, bool]] = []
        palette = None
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if key == app.COMMAND_PALETTE_BINDING and app.ENABLE_COMMAND_PALETTE:
                palette = (
                    key,
                    app.get_key_display(binding),
                    binding.description or "Commands",
                    active.enabled,
                )
                continue
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            entries.append((key, app.get_key_display(binding), binding.description, active.enabled))
        return entries, palette

    def render(self) -> Text:
        width = self.size.width
        key_style = self.get_component_rich_style("key-bar--key", partial=True)
        desc_style = self.get_component_rich_style("key-bar--description", partial=True)
        off_style = self.get_component_rich_style("key-bar--disabled", partial=True)
        entries, palette = self._entries()
        right = Text()
        if palette is not None:
            right.append("│ ", off_style).append(f"{palette[1]}", key_style).append(
                f" {palette[2]} ", desc_style
            )
        room = max(0, width - right.cell_len)
        line = Text(no_wrap=True, overflow="ellipsis")
        spans: list[tuple[int, int, str]] = []
        for key, shown, description, enabled in entries:
            piece_len = len(shown) + len(description) + 4
            if line.cell_len + piece_len > room:
                if line.cell_len < room:
                    line.append("…", off_style)
                break
            start = line.cell_len
            line.append(f" {shown} ", off_style if not enabled else key_style)
            line.append(f"{description} ", off_style if not enabled else desc_style)
            spans.append((start, line.cell_len, key))
        line.pad_right(max(0, room - line.cell_len))
        if palette is not None and width >= right.cell_len:
            spans.append((line.cell_len, line.cell_len + right.cell_len, palette[0]))
            line.append_text(right)
        self._spans = spans
        return line

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return
