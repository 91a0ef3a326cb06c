"""Every key of the app as data: one table of `BindingSpec`s, remappable by binding id.

Why a table: the footer, the `?` help screen, the ctrl+p palette and the operator's remapping in the
settings file all read this one list. Remapping (config.toml; unknown ids are reported, not fatal):

    [keys]
    "plan.launch" = "ctrl+l"
    "app.view_events" = "e,4"

How a view registers its keys (part B does this for run/logs):

    from console import keymap
    keymap.register("run", (
        keymap.BindingSpec("run.abort", "A", "abort", "Abort run", mutates=True),
        keymap.BindingSpec("run.fleet_next", "n", "next_node", "Next node", show=False),
    ))

    class RunView(Widget):
        BINDINGS = keymap.bindings_for("run")
        def action_abort(self) -> None: ...

- `id` is unique across the app ("<scope>.<name>" for views); it is what the settings file remaps.
- `action` is an action name on the widget that holds the bindings (the view), or on the app for
  scope "app". The palette runs it after switching to the view, so a view's actions must work
  when called without a key press.
- `mutates=True` marks actions that change the cluster (launch, abort, cleanup): `--readonly`
  hides their keys and palette entries, and the app refuses them if invoked another way.
- A view that wants its keys active must hold focus (be `can_focus` or contain a focusable widget);
  the app focuses the view's first focusable widget when it is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from textual.binding import Binding

APP = "app"
VIEWS: tuple[str, ...] = ("plan", "run", "logs", "events")


@dataclass(frozen=True)
class BindingSpec:
    id: str
    key: str
    action: str
    description: str
    show: bool = True
    mutates: bool = False
    priority: bool = False

    def binding(self) -> Binding:
        return Binding(self.key, self.action, self.description, show=self.show, priority=self.priority,
                       id=self.id)


_TABLE: dict[str, list[BindingSpec]] = {}


def register(scope: str, specs: Iterable[BindingSpec]) -> None:
    """Add (or replace, by id) bindings of `scope` ("app" or a view name)."""
    rows = _TABLE.setdefault(scope, [])
    for spec in specs:
        rows[:] = [r for r in rows if r.id != spec.id]
        rows.append(spec)


def specs(scope: str | None = None) -> list[BindingSpec]:
    """The bindings of one scope, or of every scope (app first, then views in order)."""
    if scope is not None:
        return list(_TABLE.get(scope, ()))
    order = [APP, *VIEWS, *sorted(set(_TABLE) - {APP, *VIEWS})]
    return [s for sc in order for s in _TABLE.get(sc, ())]


def scope_of(binding_id: str) -> str | None:
    for scope, rows in _TABLE.items():
        if any(r.id == binding_id for r in rows):
            return scope
    return None


def bindings_for(scope: str) -> list[Binding]:
    """Textual `Binding`s for a class's BINDINGS (evaluated at import: register first)."""
    return [s.binding() for s in _TABLE.get(scope, ())]


def mutating_actions(scope: str) -> frozenset[str]:
    return frozenset(s.action for s in _TABLE.get(scope, ()) if s.mutates)


def validate_keymap(keys: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split the settings' remap into (known ids -> keys, one-line problems for unknown ids)."""
    known = {s.id for s in specs()}
    good = {k: v for k, v in keys.items() if k in known and str(v).strip()}
    bad = [f"unknown key binding id {k!r} in settings (known: {', '.join(sorted(known))})"
           for k in keys if k not in known]
    return good, bad


def effective_key(spec: BindingSpec, keymap: Mapping[str, str]) -> str:
    """The key the operator presses for `spec` after remapping."""
    return keymap.get(spec.id, spec.key)


register(APP, (
    BindingSpec("app.view_plan", "1", "show_view('plan')", "Plan"),
    BindingSpec("app.view_run", "2", "show_view('run')", "Run"),
    BindingSpec("app.view_logs", "3", "show_view('logs')", "Logs"),
    BindingSpec("app.view_events", "4", "show_view('events')", "Events"),
    BindingSpec("app.next_view", "tab", "cycle_view(1)", "Next view", show=False, priority=True),
    BindingSpec("app.prev_view", "shift+tab", "cycle_view(-1)", "Previous view", show=False, priority=True),
    BindingSpec("app.back", "escape", "back", "Back", show=False),
    BindingSpec("app.help", "question_mark", "help", "Help"),
    BindingSpec("app.palette", "ctrl+p", "command_palette", "Commands", show=False),
    BindingSpec("app.quit", "q", "quit", "Quit"),
    BindingSpec("app.rollout_prev", "left_square_bracket", "rollout_step(-1)", "Previous rollout", show=False),
    BindingSpec("app.rollout_next", "right_square_bracket", "rollout_step(1)", "Next rollout", show=False),
))

register("plan", (
    BindingSpec("plan.launch", "L", "launch", "Launch", mutates=True),
    BindingSpec("plan.preflight", "p", "preflight", "Preflight"),
    BindingSpec("plan.prepare", "P", "prepare", "Prepare nodes"),
    BindingSpec("plan.copy_command", "c", "copy_command", "Copy cmd"),
    BindingSpec("plan.reset", "ctrl+r", "reset", "Reset edits", show=False),
    BindingSpec("plan.next_field", "down", "next_field", "Next field", show=False),
    BindingSpec("plan.prev_field", "up", "prev_field", "Previous field", show=False),
    BindingSpec("plan.page_down", "pagedown", "page(1)", "Scroll findings down", show=False),
    BindingSpec("plan.page_up", "pageup", "page(-1)", "Scroll findings up", show=False),
))

register("events", (
    BindingSpec("events.refresh", "r", "refresh", "Refresh"),
    BindingSpec("events.copy_entry", "c", "copy_entry", "Copy entry"),
))
