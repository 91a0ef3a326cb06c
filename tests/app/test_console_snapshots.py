"""Snapshots of the run and logs views at 120x40 and 80x24 (fixed data, fixed clock, no workers)."""

from __future__ import annotations

import pytest
from app_helpers import make_app
from run_fixtures import T0, metrics_view, snapshot, status, store

from console.messages import MetricsArrived, RunStateChanged, SnapshotArrived
from console.views.logs import LogsView
from console.views.run import RunView

SIZES = [(120, 40), (80, 24)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_run_view_snapshot(snap_compare, tmp_path, size):
    app = make_app(tmp_path)

    async def run_before(pilot) -> None:
        app.query_one(RunView).clock = lambda: T0 + 3723
        await pilot.press("2")
        app.post_message(SnapshotArrived(snapshot()))
        app.post_message(MetricsArrived(metrics_view()))
        app.post_message(RunStateChanged(status()))
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_logs_view_snapshot(snap_compare, tmp_path, size):
    app = make_app(tmp_path / "state")
    st = store(tmp_path, 300)

    async def run_before(pilot) -> None:
        await pilot.press("3")
        app.query_one(LogsView).set_store(st)
        await pilot.pause()
        await pilot.press("slash", *"grad_norm 1.1", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
