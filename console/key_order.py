"""Keys are handled one at a time, in the order they were typed, and a field commits before a binding acts.

Why: Textual posts a key to the focused widget and lets it bubble up parent by parent (a message queue each)
to the bindings; a key the field handles itself overtakes one still on its way to a binding. Typed while the
app was busy (the first frame's imports in a fresh clone), `Down Down End ctrl+u` reached the plan form as
`End ctrl+u Down Down`: the wrong field was cleared. Here the app routes the next key only once the one before
is done everywhere: a marker posted right behind it bubbles the same way, and when the marker reaches the app
(after whatever the key's handling queued there) the next key goes to whatever has focus then.

The rule for a field being edited (`EditsInPlace`): the keys it edits with are its own; any other key that a
binding holds first commits the field, then reaches its action.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from textual.message import Message

if TYPE_CHECKING:
    from textual import events
    from textual.app import App
    from textual.dom import DOMNode
    from textual.timer import Timer

LOST_MARKER_S = 1.0  # a marker whose widget went away in between: route on after this anyway


@runtime_checkable
class EditsInPlace(Protocol):
    """A field edited where it stands (the plan form, a prompt)."""

    def takes(self, event: events.Key) -> bool:
        """Whether `event` is one of the keys this field edits with (then no binding sees it)."""

    def commit(self) -> None:
        """Make the text typed so far count (before a binding's action runs)."""


class KeyHandled(Message):
    """Posted behind a key to the widget it went to; reaching the app, it says the key was handled."""

    def __init__(self, serial: int) -> None:
        super().__init__()
        self.serial = serial


class KeyOrder:
    """The app's keys waiting for the one before them to be handled."""

    def __init__(self, app: App[Any], deliver: Callable[[events.Key], Awaitable[DOMNode]]) -> None:
        """deliver: routes one key as Textual would (priority bindings, else the focused widget) and
        answers where it went."""
        self._app = app
        self._deliver = deliver
        self._held: deque[events.Key] = deque()
        self._serial = 0
        self._waiting: int | None = None
        self._timer: Timer | None = None

    async def arrive(self, event: events.Key) -> None:
        """A key from the terminal (or a test's press): routed now, or once the keys before it are done."""
        if self._waiting is not None:
            self._held.append(event)
            return
        await self._send(event)

    def commit_before_binding(self, event: events.Key) -> None:
        """The focused field commits when `event` is not its key but a binding's (the action then sees it);
        a binding refused for now says why instead of doing nothing (`refusal(action)` of its node)."""
        field = self._app.focused
        if isinstance(field, EditsInPlace) and field.takes(event):
            return
        if isinstance(field, EditsInPlace) and event.key in self._app.screen.active_bindings:
            field.commit()
        active = self._app.screen.active_bindings.get(event.key)
        if active is None:
            self._say_hidden_refusal(event.key)
            return
        if active.enabled:
            return
        refusal = getattr(active.node, "refusal", None)
        why = refusal(active.binding.action) if callable(refusal) else None
        if why:
            self._app.notify(why, severity="warning", timeout=4)

    def _say_hidden_refusal(self, key: str) -> None:
        """A key bound in the focused view to an action its `check_action` hides (a read-only console's
        launch or abort) is in no active binding: its view still says why, rather than nothing happening."""
        focused = self._app.focused
        for node in focused.ancestors_with_self if focused is not None else ():
            refusal = getattr(node, "refusal", None)
            if not callable(refusal):
                continue
            for binding in node._bindings.key_to_bindings.get(key, ()):
                why = refusal(binding.action)
                if why:
                    self._app.notify(why, severity="warning", timeout=4)
                    return

    def marker(self, serial: int) -> None:
        """A marker reached the app: after what the key's handling queued here, the next key may go."""
        if serial == self._waiting:
            self._app.call_later(self._next, serial)

    async def _send(self, event: events.Key) -> None:
        target = await self._deliver(event)
        self._serial += 1
        serial = self._waiting = self._serial
        if not target.post_message(KeyHandled(serial)):  # a widget closing: nothing to wait for
            self._app.call_later(self._next, serial)
            return
        self._timer = self._app.set_timer(LOST_MARKER_S, partial(self._next, serial), name="key-order")

    async def _next(self, serial: int) -> None:
        """The key `serial` is done (its marker came, or was lost): route the next one held."""
        if serial != self._waiting:
            return  # already moved on (the marker came after the timer, or the other way round)
        self._waiting = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._held:
            await self._send(self._held.popleft())
