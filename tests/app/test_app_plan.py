"""Pilot tests of the plan view: live rules, inline errors, launch gating and the launch modal."""

from __future__ import annotations

import socket

from app_helpers import edit_settled, make_app
from form_rows import form_row
from textual.widgets import Button, Static
from waiting import until

from console.views.plan import PlanView
from console.widgets.confirm import ConfirmModal
from console.widgets.layout_form import VARIANT, LayoutForm
from console.widgets.plan_panels import DerivedPanel, FindingsPanel, LaunchStatus, PreflightPanel


def _text(widget: Static) -> str:
    return str(widget.content)


async def _set_field(pilot, app, path: str, text: str) -> None:
    form = app.query_one(LayoutForm)
    form.focus()
    form.move_to(path)
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(form_row(form, path).value), *list(text))
    plan = app.query_one(PlanView)
    await until(pilot, lambda: edit_settled(plan, path, text), f"the plan to re-check {path}={text}")


async def test_edit_shows_finding_disables_launch_then_fix_enables(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        assert plan.check_action("launch", ()) is True
        await _set_field(pilot, app, "cluster.nodes", "13")
        form = app.query_one(LayoutForm)
        assert form.severity_of("cluster.nodes") == "error"
        assert "A1" in _text(app.query_one(FindingsPanel))
        row = form_row(form, "cluster.nodes")  # drawn beside the field: label, value, note (cut to fit)
        assert row.label == "Nodes" and row.value == "13" and row.note.startswith("training grid TP·PP·CP")
        assert "does not divide" in _text(app.query_one(FindingsPanel))  # the whole finding
        derived = _text(app.query_one(DerivedPanel))  # figures the grid leaves undefined: a dash, not None
        assert "None" not in derived and any(line.split() == ["dp", "—"] for line in derived.splitlines()), (
            derived
        )
        assert plan.check_action("launch", ()) is None  # dimmed in the footer
        assert "Launch blocked" in _text(app.query_one(LaunchStatus))
        await pilot.press("escape", "L")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        await _set_field(pilot, app, "cluster.nodes", "16")
        assert form.severity_of("cluster.nodes") == ""
        assert plan.check_action("launch", ()) is True
        assert "Ready to launch" in _text(app.query_one(LaunchStatus))


async def test_bad_value_is_inline_and_kept(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        await _set_field(pilot, app, "rollout.mem_fraction", "1.5")
        form = app.query_one(LayoutForm)
        assert form.severity_of("rollout.mem_fraction") == "error"
        assert form_row(form, "rollout.mem_fraction").value == "1.5"
        assert "rollout.mem_fraction" in plan.launch_blockers()[0]
        # the rest of the spec is still checked: the other fields keep their values and no rule fires
        assert plan.evaluation.spec is not None and plan.evaluation.spec.rollout.mem_fraction == 0.7
        assert plan.check_action("launch", ()) is None


async def test_launch_modal_cancel_focused_and_escape_cancels(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("L")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmModal)
        assert isinstance(app.focused, Button) and app.focused.id == "cancel"
        body = _text(app.screen.query_one(".body", Static))
        assert "128 GPUs" in body and "Preflight" in body
        assert "Derived: world size 128, dp " in body and "{" not in body  # figures in words, no Python reprs
        await pilot.press("tab")  # Tab stays inside the modal (view switching is off)
        assert app.current_view == "plan"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        assert not (tmp_path / "audit.jsonl").exists()  # nothing was launched


async def test_confirmed_launch_without_controller_says_so(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("L")
        await pilot.pause()
        await pilot.press("right", "enter")  # move to "Launch" explicitly, then confirm
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert any("launch is not available" in n.message for n in app._notifications)


async def test_readonly_hides_and_refuses_launch(tmp_path):
    app = make_app(tmp_path, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert "L" not in app.screen.active_bindings
        assert "READ-ONLY" in _text(app.query_one(LaunchStatus))
        await pilot.press("L")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        await app.run_binding("plan.launch")  # e.g. from the palette
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        assert any("read-only" in n.message for n in app._notifications)


async def test_readonly_keys_say_why_they_are_refused(tmp_path):
    """Issue 35: a hidden key of a read-only console (L in Plan, A in Run) says why in a toast, never
    nothing; a key no view binds says nothing."""
    app = make_app(tmp_path, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("L")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert "read-only console (--readonly): launch is refused" in said, said
        await pilot.press("2", "A")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any(m.startswith("read-only console (--readonly): abort") for m in said), said
        before = len(app._notifications)
        await pilot.press("Z")
        await pilot.pause()
        assert len(app._notifications) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_preflight_unreachable_dashboard_is_one_line(tmp_path):
    app = make_app(tmp_path, address=f"http://127.0.0.1:{_free_port()}")
    async with app.run_test(size=(120, 40)) as pilot:
        assert "not checked" in _text(app.query_one(PreflightPanel))
        await pilot.press("p")
        await app.workers.wait_for_complete()
        await pilot.pause()
        plan = app.query_one(PlanView)
        assert plan.preflight_state == "unavailable"
        assert "\n" not in plan.preflight_note and plan.preflight_note
        assert "could not run" in _text(app.query_one(PreflightPanel))


async def test_variant_picker_lists_presets_and_checkpoints(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        keys = [key for _label, key in plan.choices]
        assert "preset:nemotron-3-ultra-550b-a55b-4layer" in keys
        assert "checkpoint:Nemotron-Ultra-2layer-test" in keys
        assert not any("not-a-checkpoint" in k for k in keys)
        plan.choose_variant("checkpoint:Nemotron-Ultra-2layer-test")
        await pilot.pause()
        assert plan.evaluation.spec is not None
        assert plan.evaluation.spec.model.name == "Nemotron-Ultra-2layer-test"
        assert "Nemotron-Ultra-2layer-test" in form_row(app.query_one(LayoutForm), VARIANT).value
        assert "Nemotron-Ultra-2layer-test" in plan.command_text


async def test_copy_command_uses_clipboard(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert app.clipboard.startswith("ray job submit")
        assert "ultra-console-260101-120000-000" in app.clipboard


async def test_page_keys_scroll_the_compact_plan(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        body = app.query_one("#plan-body")
        assert body.scroll_y == 0
        await pilot.press("pagedown")
        await until(pilot, lambda: body.scroll_y > 0, "the findings to scroll down")
        await pilot.press("pageup")
        await until(pilot, lambda: body.scroll_y == 0, "the findings to scroll back up")


async def test_a_burst_of_keys_is_checked_once_and_launch_waits_for_it(tmp_path, monkeypatch):
    monkeypatch.setattr("console.views.plan.REBUILD_DEBOUNCE_S", 30.0)  # the burst never outlives it here
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        calls = []
        original = plan.rebuild

        def counted() -> object:
            calls.append(1)
            return original()

        monkeypatch.setattr(plan, "rebuild", counted)
        form = app.query_one(LayoutForm)
        form.focus()
        form.move_to("cluster.nodes")
        await pilot.press("backspace", "backspace", "1", "3")
        assert plan.launch_blockers() == ["checking the edit"]
        assert plan.check_action("launch", ()) is None
        assert calls == []
        plan.action_launch()  # flushes first: refused for the real reason (13 nodes), not a stale "ok"
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        assert calls == [1]
        assert any("A1" in b for b in plan.launch_blockers())


async def test_a_burst_of_downs_walks_the_form_without_losing_one(tmp_path):
    """Keys from a terminal arrive in a burst (tmux send-keys, a held key): each Down is one row."""
    from textual import events

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        focused = app.focused  # (not narrowed: the form takes the focus below)
        assert focused is app.query_one(PlanView)
        form = app.query_one(LayoutForm)
        for _ in range(17):  # queued before any is handled
            app.post_message(events.Key("down", None))
        await until(
            pilot,
            lambda: app.focused is form and form.current_path == "batch.num_rollout",
            "17 rows down (batch.num_rollout)",
            timeout=10,
        )
        for _ in range(3):  # and back up, as fast
            app.post_message(events.Key("up", None))
        await until(pilot, lambda: form.current_path == "batch.n_samples_per_prompt", "3 rows up", timeout=10)
        await pilot.pause()  # no stray key still queued
        assert app.focused is form and form.current_path == "batch.n_samples_per_prompt" and form.cursor == 13


async def test_after_an_edit_every_key_of_the_view_reaches_its_action(tmp_path):
    """Issue 35: a field just edited keeps the focus, and L, p, P, c still launch, check, prepare and copy
    (no Esc first); the edited value is what they act on."""
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        called: list[str] = []
        for name in ("preflight", "prepare"):  # these reach the cluster: the action being asked is enough
            setattr(plan, f"action_{name}", lambda name=name: called.append(name))
        await _set_field(pilot, app, "batch.num_rollout", "7")
        assert app.focused is app.query_one(LayoutForm)
        await pilot.press("c")
        await until(pilot, lambda: app.clipboard.startswith("ray job submit"), "the command copied")
        assert "--num-rollout 7" in app.clipboard
        await pilot.press("p", "P")
        await until(pilot, lambda: called == ["preflight", "prepare"], "preflight and prepare asked")
        await pilot.press("L")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal), "the launch modal")
        assert form_row(app.query_one(LayoutForm), "batch.num_rollout").value == "7"  # nothing typed into it
