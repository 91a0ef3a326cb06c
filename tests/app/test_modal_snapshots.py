"""Snapshots of the modals at 80x24 and 200x50 (issue 33: every view and modal at both sizes): the compare
prompt, the abort confirmation with what an abort loses, the launch confirmation, an alert opened whole.
Fixed data, fixed clock, no workers, no Ray; the views' own code builds each modal's text. (The samples,
phase timeline and stacks screens have theirs in test_samples_screen.py and test_phase_timeline.py.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from app_helpers import PilotApp, make_app
from run_fixtures import T0, metrics_view, status
from test_app_snapshots import ALERTS, _pinned_shim  # noqa: F401 (an autouse fixture: the shim's address pinned)
from textual.widgets import Input
from waiting import until

from console.messages import AlertsChanged, MetricsArrived, RunStateChanged
from console.views.plan import PlanView
from console.views.run import RunView
from console.widgets.abort_modal import AbortActions, AbortModal
from console.widgets.compare_prompt import ComparePrompt
from console.widgets.confirm import ConfirmModal
from console.widgets.text_modal import TextModal

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def _snap(
    snap_compare, tmp_path, size, show: Callable[[PilotApp, Any], Awaitable[None]], modal: type
) -> bool:
    """The app at `size` once `show` has opened `modal` (and the screen under it has settled)."""
    app = make_app(tmp_path)

    async def run_before(pilot) -> None:
        await show(app, pilot)
        await until(pilot, lambda: isinstance(app.screen, modal), f"the {modal.__name__} open")
        for field in app.screen.query(
            Input
        ):  # a blinking cursor is drawn or not by the clock (CI: a mismatch)
            field.cursor_blink = False
        await pilot.pause()

    return bool(snap_compare(app, terminal_size=size, run_before=run_before))


async def _never() -> bool:
    raise AssertionError("a snapshot of the confirm stage runs no abort step")


@pytest.mark.parametrize("size", SIZES)
def test_compare_prompt_snapshot(snap_compare, tmp_path, size):
    async def show(app: PilotApp, pilot) -> None:
        await pilot.press("2")
        app.query_one(RunView).focus()
        await pilot.press("C")

    assert _snap(snap_compare, tmp_path, size, show, ComparePrompt)


@pytest.mark.parametrize("size", SIZES)
def test_abort_modal_snapshot(snap_compare, tmp_path, size):
    """The abort confirmation names the run and what stopping it now loses (the Run view's numbers)."""

    async def show(app: PilotApp, pilot) -> None:
        run = app.query_one(RunView)
        run.clock = lambda: T0 + 3723
        await pilot.press("2")
        app.post_message(MetricsArrived(metrics_view()))
        app.post_message(RunStateChanged(status()))
        await until(pilot, lambda: run.metrics is not None, "the run's metrics")
        actions = AbortActions(_never, _never, _never, _never, _never)  # type: ignore[arg-type]
        await app.push_screen(AbortModal(status().job_id, run.loss_text(), actions))

    assert _snap(snap_compare, tmp_path, size, show, AbortModal)


@pytest.mark.parametrize("size", SIZES)
def test_launch_confirmation_snapshot(snap_compare, tmp_path, size):
    """What the plan view asks before a launch: the plan's summary, derived figures, warnings, preflight."""

    async def show(app: PilotApp, pilot) -> None:
        plan = app.query_one(PlanView)
        await until(pilot, lambda: plan.evaluation is not None, "the plan evaluated")
        await app.push_screen(ConfirmModal("Launch this run?", plan._confirm_body(), "Launch"))

    assert _snap(snap_compare, tmp_path, size, show, ConfirmModal)


@pytest.mark.parametrize("size", SIZES)
def test_alert_opened_snapshot(snap_compare, tmp_path, size):
    """Enter on an alert in the Events view: the alert whole, wrapped."""

    async def show(app: PilotApp, pilot) -> None:
        await pilot.press("4")
        app.post_message(AlertsChanged(ALERTS))
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.query_one("#alerts").focus()
        await pilot.press("enter")

    assert _snap(snap_compare, tmp_path, size, show, TextModal)
