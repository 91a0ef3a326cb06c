"""Every key of the app as data: one table of `BindingSpec`s per scope, remappable by binding id.

Why one table: the footer, the `?` help screen, the ctrl+p palette and the operator's remapping in the
settings file all read it, and the settings are checked before any view module is imported (the views
after the first are imported only once the first frame is drawn). Remapping (config.toml; an unknown id, or
a key that another binding of the same view or of the app already has, is reported in one line and left
out, never fatal):

    [keys]
    "plan.launch" = "ctrl+l"
    "app.view_events" = "e,4"

A view takes its keys from its scope's row:

    class RunView(ConsoleView):
        SCOPE = "run"
        BINDINGS = keymap.bindings_for("run")
        def action_abort(self) -> None: ...

- `id` is unique across the app ("<scope>.<name>"); it is what the settings file remaps.
- `action` is an action name on the widget that holds the bindings (the view), or on the app for
  scope "app". The palette runs it after switching to the view, so a view's actions must work
  when called without a key press.
- `mutates=True` marks actions that change the cluster (launch, abort, cleanup): `--readonly`
  hides their keys and palette entries, and the app refuses them if invoked another way.
- A view that wants its keys active must hold focus (be `can_focus` or contain a focusable widget);
  the app focuses the view's first focusable widget when it is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding, BindingType

APP = "app"


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
        return Binding(
            self.key, self.action, self.description, show=self.show, priority=self.priority, id=self.id
        )


# scope -> its keys; the app's first, then the views in the order of their number keys (1-4).
TABLE: dict[str, tuple[BindingSpec, ...]] = {
    APP: (
        BindingSpec("app.view_plan", "1", "show_view('plan')", "Plan"),
        BindingSpec("app.view_run", "2", "show_view('run')", "Run"),
        BindingSpec("app.view_logs", "3", "show_view('logs')", "Logs"),
        BindingSpec("app.view_events", "4", "show_view('events')", "Events"),
        BindingSpec("app.next_view", "tab", "cycle_view(1)", "Next view", show=False, priority=True),
        BindingSpec(
            "app.prev_view", "shift+tab", "cycle_view(-1)", "Previous view", show=False, priority=True
        ),
        BindingSpec("app.back", "escape", "back", "Back", show=False),
        BindingSpec("app.help", "question_mark", "help", "Help"),
        BindingSpec("app.palette", "ctrl+p", "command_palette", "Commands", show=False),
        BindingSpec("app.quit", "q", "quit", "Quit"),
        BindingSpec(
            "app.rollout_prev", "left_square_bracket", "rollout_step(-1)", "Previous rollout", show=False
        ),
        BindingSpec(
            "app.rollout_next", "right_square_bracket", "rollout_step(1)", "Next rollout", show=False
        ),
    ),
    "plan": (
        BindingSpec("plan.launch", "L", "launch", "Launch", mutates=True),
        BindingSpec("plan.preflight", "p", "preflight", "Preflight"),
        BindingSpec("plan.prepare", "P", "prepare", "Prepare nodes"),
        BindingSpec("plan.doctor", "D", "doctor", "Doctor: check the head and every node", show=False),
        BindingSpec("plan.copy_command", "c", "copy_command", "Copy cmd"),
        BindingSpec("plan.reset", "ctrl+r", "reset", "Reset edits", show=False),
        BindingSpec("plan.next_field", "down", "next_field", "Next field", show=False),
        BindingSpec("plan.prev_field", "up", "prev_field", "Previous field", show=False),
        BindingSpec("plan.page_down", "pagedown", "page(1)", "Scroll findings down", show=False),
        BindingSpec("plan.page_up", "pageup", "page(-1)", "Scroll findings up", show=False),
    ),
    "run": (
        BindingSpec("run.abort", "A", "abort", "Abort run", mutates=True),
        BindingSpec("run.cause_line", "enter", "cause_line", "Go to the cause's line", show=False),
        BindingSpec(
            "run.compare", "C", "compare", "Compare with… (a resumed attempt: the one before)", show=False
        ),
        BindingSpec("run.resume", "R", "resume", "Resume: fix, last checkpoint, next attempt", show=False),
        BindingSpec("run.compare_clear", "X", "compare_clear", "Clear the comparison", show=False),
        BindingSpec("run.stacks", "S", "stacks", "Stacks of every rank", show=False),
        BindingSpec("run.phases", "T", "phases", "Phase timeline", show=False),
        BindingSpec("run.samples", "G", "samples", "Samples: GRPO groups of a rollout", show=False),
    ),
    "logs": (
        BindingSpec("logs.search", "slash", "search", "Search"),
        BindingSpec("logs.next_match", "n", "next_match", "Next"),
        BindingSpec("logs.prev_match", "N", "prev_match", "Prev"),
        BindingSpec("logs.filter", "f", "filter", "Filter"),
        BindingSpec("logs.wrap", "w", "toggle_wrap", "Wrap"),
        BindingSpec("logs.goto_time", "t", "goto_time", "Jump to time"),
        BindingSpec("logs.copy_line", "y", "copy_line", "Copy line"),
        BindingSpec("logs.follow", "G", "follow", "Follow"),
        BindingSpec("logs.end", "end", "follow", "Follow", show=False),
        BindingSpec("logs.top", "g", "top", "Top", show=False),
        BindingSpec("logs.home", "home", "top", "Top", show=False),
        BindingSpec("logs.down", "j,down", "cursor(1)", "Down", show=False),
        BindingSpec("logs.up", "k,up", "cursor(-1)", "Up", show=False),
        BindingSpec("logs.page_down", "pagedown,space", "page(1)", "Page down", show=False),
        BindingSpec("logs.page_up", "pageup,b", "page(-1)", "Page up", show=False),
        BindingSpec("logs.compact", "p", "toggle_compact", "Compact prefix", show=False),
    ),
    "events": (
        BindingSpec("events.refresh", "r", "refresh", "Refresh"),
        BindingSpec("events.copy_entry", "c", "copy_entry", "Copy entry"),
        BindingSpec("events.open_alert", "o", "open_alert", "Open alert whole", show=False),
    ),
    "stacks": (  # the stacks screen the run view's S opens
        BindingSpec("stacks.open", "enter", "open_group", "Open the group's stack"),
        BindingSpec("stacks.again", "r", "again", "Dump again"),
        BindingSpec("stacks.close", "escape", "close", "Close"),
    ),
    "samples": (  # the samples screen the run view's G opens
        BindingSpec("samples.open", "enter", "open", "Open the group"),
        BindingSpec("samples.zero", "z", "flip('zero')", "Zero-std only"),
        BindingSpec("samples.truncated", "t", "flip('truncated')", "Truncated only"),
        BindingSpec("samples.sort", "s", "flip('sort')", "Sort"),
        BindingSpec("samples.plot", "p", "flip('plot')", "Plot", show=False),
        BindingSpec("samples.prev", "left_square_bracket", "rollout(-1)", "Previous rollout"),
        BindingSpec("samples.next", "right_square_bracket", "rollout(1)", "Next rollout"),
        BindingSpec("samples.back", "escape", "back", "Back"),
    ),
    "phases": (  # the full-screen timeline the run view's T opens
        BindingSpec("phases.close", "escape", "close", "Close"),
    ),
    "doctor": (  # the doctor screen the plan view's D opens
        BindingSpec("doctor.recheck", "r", "recheck", "Check again"),
        BindingSpec("doctor.close", "escape", "close", "Close"),
    ),
    "prepare": (  # the prepare screen the plan view's P opens
        BindingSpec("prepare.fetch", "F", "fetch", "Fetch what nodes lack", mutates=True),
        BindingSpec("prepare.recheck", "r", "recheck", "Check again"),
        BindingSpec("prepare.close", "escape", "close", "Close"),
    ),
}


def specs(scope: str | None = None) -> list[BindingSpec]:
    """The bindings of one scope, or of every scope (app first, then views in order)."""
    if scope is not None:
        return list(TABLE.get(scope, ()))
    return [s for rows in TABLE.values() for s in rows]


def scope_of(binding_id: str) -> str | None:
    for scope, rows in TABLE.items():
        if any(r.id == binding_id for r in rows):
            return scope
    return None


def bindings_for(scope: str) -> list[BindingType]:
    """Textual `Binding`s for a class's BINDINGS."""
    return [s.binding() for s in TABLE.get(scope, ())]


def mutating_actions(scope: str) -> frozenset[str]:
    return frozenset(s.action for s in TABLE.get(scope, ()) if s.mutates)


def validate_keymap(keys: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split the settings' remap into (known ids -> keys, one-line problems): an unknown id, or a key another
    binding that shares its reach already has (it would leave that view or action unreachable), is refused."""
    known = {s.id for s in specs()}
    problems = [_unknown(k) for k in keys if k not in known]
    good: dict[str, str] = {}
    for binding_id, value in keys.items():
        if binding_id not in known or not str(value).strip():
            continue
        taken = _taken_by(binding_id, str(value), good)
        if taken is None:
            good[binding_id] = str(value)
        else:
            problems.append(taken)
    return good, problems


def _keys(value: str) -> set[str]:
    return {k.strip() for k in value.split(",") if k.strip()}


def _taken_by(binding_id: str, value: str, remap: Mapping[str, str]) -> str | None:
    """One line when a key of `value` is already another binding's in a scope `binding_id` shares (its
    own, or the app's, which every view shares), else None."""
    scope = scope_of(binding_id)
    wanted = _keys(value) - _keys(_spec(binding_id).key)  # its own default keys shared as they always were
    for spec in specs():
        other = scope_of(spec.id)
        if spec.id == binding_id or not (other == scope or APP in (scope, other)):
            continue
        shared = sorted(wanted & _keys(effective_key(spec, remap)))
        if shared:
            return (
                f"key binding {binding_id!r} = {value!r} refused: {shared[0]!r} is already {spec.id!r} "
                f"({spec.description}); it keeps {effective_key(_spec(binding_id), remap)!r}"
            )
    return None


def _spec(binding_id: str) -> BindingSpec:
    return next(s for s in specs() if s.id == binding_id)


def _unknown(binding_id: str) -> str:
    """One line that names the ids the operator may have meant: those of the same scope, else the scopes."""
    scope = binding_id.split(".", 1)[0]
    if scope in TABLE:
        hint = f"{scope} ids: {', '.join(s.id for s in TABLE[scope])}"
    else:
        hint = f"ids start with a scope: {', '.join(f'{sc}.' for sc in TABLE)}"
    return f"unknown key binding id {binding_id!r} in settings ({hint}; `?` lists every key)"


def effective_key(spec: BindingSpec, keymap: Mapping[str, str]) -> str:
    """The key the operator presses for `spec` after remapping."""
    return keymap.get(spec.id, spec.key)
