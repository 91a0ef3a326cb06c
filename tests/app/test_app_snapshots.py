"""SVG snapshots of the plan view, events view and help at 80x24, 120x40 and 200x50.

Deterministic: fixed run id, fixed audit times, no workers, no clock on screen, the shim package
address pinned (it is a content hash of shim/, which other work changes). Update only after looking
at the report: `pytest tests/app/test_app_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from app_helpers import edit_settled, make_app, write_audit
from waiting import until

from backend.severity import Severity
from backend.signals.alerts import Alert, AlertEngine
from console.messages import AlertsChanged
from console.views.plan import PlanView
from console.widgets.layout_form import LayoutForm

SIZES = [
    pytest.param((120, 40), id="120x40"),
    pytest.param((80, 24), id="80x24"),
    pytest.param((200, 50), id="200x50"),
]


def _stalled() -> Alert:
    """What the run-stalled rule (configs/alerts.toml)
    raises after 42 min without a metric, 5 min rollouts."""
    alert = AlertEngine().check_stall(now=2520.0, last_metric_ts=0.0, median_step_s=300.0)
    assert alert is not None
    return alert


ALERTS = [
    Alert("kl-spike", Severity.WARNING, "train/ppo_kl rose 8x over 3 steps", step=12),
    _stalled(),
]


@pytest.fixture(autouse=True)
def _pinned_shim(monkeypatch):
    monkeypatch.setattr(
        "backend.plan.submission._shim_runtime_env",
        lambda *args, **kwargs: {
            "py_modules": ["gcs://_ray_pkg_0000000000000000000000000000000000000000.zip"],
            "worker_process_setup_hook": "shim.ray_hook.setup",
        },
    )


@pytest.mark.parametrize("size", SIZES)
def test_plan_view(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size)


def test_plan_view_with_error_finding(snap_compare, tmp_path):
    async def edit(pilot):
        form = pilot.app.query_one(LayoutForm)
        form.focus()
        form.move_to("train.tp")
        await pilot.press("backspace", "3", "escape")
        await until(
            pilot, lambda: edit_settled(pilot.app.query_one(PlanView), "train.tp", "3"), "the edit re-checked"
        )

    assert snap_compare(make_app(tmp_path), terminal_size=(120, 40), run_before=edit)


@pytest.mark.parametrize("size", SIZES)
def test_events_view(snap_compare, tmp_path, size):
    write_audit(tmp_path)

    async def show(pilot):
        await pilot.press("4")
        pilot.app.post_message(AlertsChanged(ALERTS))
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=show)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, press=["question_mark"])
