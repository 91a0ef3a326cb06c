"""One key rule, for every binding of every view (issue 35): with a field being edited, a key the field edits
with goes to the field; every other bound key reaches its action, the field committed first.

A Pilot test per view walks the keymap (console/keymap.py): the view's own bindings and the app's, every key
of each. Before each key the field is edited again (the plan form's Rollouts row, the Logs view's search
prompt); the action is replaced by a recorder on the widget that holds it, so nothing else happens. The
fields' keys are written out here, not asked of the app: a number row takes digits and line-editing keys, a
prompt every printable character, its line-editing keys and Esc (which cancels it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app_helpers import make_app
from run_fixtures import store
from textual import events
from textual.actions import parse
from textual.widgets import Input
from waiting import until

from console import keymap
from console.views.logs import LogsView
from console.views.plan import PlanView
from console.widgets.layout_form import LayoutForm

CHARS = {
    "question_mark": "?",
    "slash": "/",
    "space": " ",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
}
LINE_KEYS = {"end", "home", "backspace", "delete", "left", "right", "ctrl+u", "ctrl+k", "ctrl+a", "ctrl+e"}
PATH = "batch.num_rollout"


def _char(key: str) -> str | None:
    return CHARS.get(key, key if len(key) == 1 else None)


def _cases(scope: str) -> list[tuple[str, str, str]]:
    """(binding id, key, scope of its holder) for every key of the view's bindings and of the app's."""
    rows = [*keymap.specs(scope), *keymap.specs(keymap.APP)]
    return [(s.id, k.strip(), keymap.scope_of(s.id) or "") for s in rows for k in s.key.split(",")]


def _called(binding_id: str, state: str = "") -> str:
    """What the recorder writes for the binding's action: its name, its arguments, the state it saw."""
    _ns, name, params = parse(next(s for s in keymap.specs() if s.id == binding_id).action)
    return f"{name}{params} {state}"


def _record(app: Any, view: Any, calls: list[str], state: Callable[[], object]) -> None:
    """Every action of the view's and the app's bindings becomes a recorder of its call and state()."""
    for scope, holder in ((view.SCOPE, view), (keymap.APP, app)):
        for spec in keymap.specs(scope):
            _ns, name, _params = parse(spec.action)

            def recorder(*args: object, _name: str = name) -> None:
                calls.append(f"{_name}{args} {state()}")

            setattr(holder, f"action_{name}", recorder)


async def test_plan_form_edited_every_key_reaches_field_or_action(tmp_path):
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        form = app.query_one(LayoutForm)
        calls: list[str] = []
        # the state an action sees: was the edit checked first (no debounced rebuild pending) and taken?
        _record(app, plan, calls, lambda: f"pending={plan._pending is not None} edit={plan.edits.get(PATH)}")
        misses = []
        for binding_id, key, _scope in _cases("plan"):
            app.screen.set_focus(form)
            form.move_to(PATH)
            form.load({**form._texts, PATH: "4"})
            await pilot.press("2")  # edited: "42", its check still pending
            calls.clear()
            await pilot.press(key)
            text = form._texts[PATH]
            char = _char(key)
            if char is not None and char.isdigit():  # a number's character: the field's
                if text != "42" + char or calls:
                    misses.append(f"{binding_id} {key!r}: field {text!r}, actions {calls}")
            elif calls != [_called(binding_id, "pending=False edit=42")]:
                misses.append(f"{binding_id} {key!r}: actions {calls}, field {text!r}")
        assert not misses, "\n".join(misses)


async def test_logs_prompt_edited_every_key_reaches_field_or_action(tmp_path, monkeypatch):
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        view = app.query_one(LogsView)
        view.set_store(store(tmp_path, 50))
        prompt = view.query_one("#logs-prompt", Input)
        searched: list[str] = []
        monkeypatch.setattr(view, "start_search", searched.append)  # the committed text; no search runs
        calls: list[str] = []
        _record(app, view, calls, lambda: "")
        misses = []
        for binding_id, key, _scope in _cases("logs"):
            view._open_prompt("search", "search")
            await pilot.press("x")
            calls.clear()
            searched.clear()
            await pilot.press(key)
            char = _char(key)
            got = (
                f"prompt {prompt.value!r} open={bool(view._prompt_mode)}, actions {calls}, search {searched}"
            )
            if key == "escape":  # cancels the prompt: nothing searched, no action
                ok = not view._prompt_mode and not calls and not searched
            elif char is not None or key in LINE_KEYS:  # text, or the caret moved
                ok = bool(view._prompt_mode) and not calls and prompt.value.startswith("x")
                ok = ok and (char is None or prompt.value == "x" + char)
            else:  # committed (the search ran for "x"), then the action
                ok = calls == [_called(binding_id)] and searched == ["x"]
            if not ok:
                misses.append(f"{binding_id} {key!r}: {got}")
            if view._prompt_mode:
                view._close_prompt()
        assert not misses, "\n".join(misses)


async def _no_field_view(tmp_path, scope: str, number: str) -> list[str]:
    """A view without a field: every key of its bindings and the app's reaches its action."""
    app = make_app(tmp_path / "state")
    misses = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(number)
        await pilot.pause()
        view = app.view(scope)
        calls: list[str] = []
        _record(app, view, calls, lambda: "")
        for binding_id, key, _scope in _cases(scope):
            calls.clear()
            await pilot.press(key)
            if calls != [_called(binding_id)]:
                misses.append(f"{binding_id} {key!r}: actions {calls}, focused {app.focused!r}")
    return misses


async def test_run_view_every_key_reaches_its_action(tmp_path):
    misses = await _no_field_view(tmp_path, "run", "2")
    assert not misses, "\n".join(misses)


async def test_events_view_every_key_reaches_its_action(tmp_path):
    misses = await _no_field_view(tmp_path, "events", "4")
    assert not misses, "\n".join(misses)


async def test_a_burst_of_keys_is_handled_in_the_order_typed(tmp_path):
    """Keys that arrive together (typed while the app was busy, e.g. its first frame's imports in a fresh
    clone) act in order: the Downs move the form's cursor before End and ctrl+u clear the row it lands on
    (a bound key used to be overtaken by the field's own keys while it bubbled up to its binding)."""
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        form = app.query_one(LayoutForm)
        app.screen.set_focus(plan)
        keys = [*["down"] * 17, "end", "ctrl+u", "9"]
        for key in keys:  # all queued at once, none waited for (Pilot's press waits after each)
            app.post_message(events.Key(key, key if len(key) == 1 else None))
        await until(pilot, lambda: form._texts[PATH] == "9", f"{PATH} to read '9'", timeout=10)
        assert form.current_path == PATH
        assert form._texts["batch.max_tokens_per_gpu"] != ""  # the row above was never cleared
