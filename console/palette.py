"""ctrl+p: a command-palette Provider listing every action of the keymap table.

Each hit runs the action through `app.run_binding(id)`, which switches to the action's view first,
so every key is also reachable by name. Actions `--readonly` refuses are not listed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Provider

from console import keymap
from console.host import ConsoleHost
from console.widgets.help_screen import key_label

HIDDEN = frozenset({"app.palette", "app.back", "app.next_view", "app.prev_view"})


class KeymapCommands(Provider):
    @property
    def console(self) -> ConsoleHost:
        """The palette is opened only in UltraConsoleApp, a ConsoleHost (its COMMANDS name this provider)."""
        return cast("ConsoleHost", self.app)

    def _entries(self) -> list[tuple[str, str, str]]:
        """(binding id, title, help) for every action the palette may offer now."""
        app = self.console
        remap, readonly = app.keymap_overrides, app.readonly
        out = []
        for spec in keymap.specs():
            if spec.id in HIDDEN or (readonly and spec.mutates):
                continue
            scope = keymap.scope_of(spec.id) or ""
            where = "" if scope == keymap.APP else f"{scope.capitalize()}: "
            out.append(
                (
                    spec.id,
                    f"{where}{spec.description}",
                    f"key {key_label(keymap.effective_key(spec, remap))} · {spec.id}",
                )
            )
        return out

    async def discover(self) -> AsyncIterator[DiscoveryHit]:
        for binding_id, title, help_text in self._entries():
            yield DiscoveryHit(title, partial(self.console.run_binding, binding_id), help=help_text)

    async def search(self, query: str) -> AsyncIterator[Hit]:
        matcher = self.matcher(query)
        for binding_id, title, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(title),
                    partial(self.console.run_binding, binding_id),
                    help=help_text,
                )
