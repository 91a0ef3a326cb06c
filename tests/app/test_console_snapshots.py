"""Snapshots of the run and logs views at 80x24, 120x40 and 200x50 (fixed data, fixed clock, no workers)."""

from __future__ import annotations

import pytest
from app_helpers import make_app, type_text
from run_fixtures import T0, metrics_view, snapshot, status, store
from textual.widgets import Input
from waiting import until

from backend.cluster.telemetry import ClusterSnapshot
from console.messages import MetricsArrived, RunStateChanged, SnapshotArrived
from console.views.logs import LogsView
from console.views.run import RunView
from console.widgets.gpu_fleet import GpuFleet

SIZES = [(120, 40), (80, 24), (200, 50)]
RUN_SIZES = [(80, 24), (120, 40), (200, 50)]  # every width the app supports: charts' titles and legends


@pytest.mark.parametrize("size", RUN_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
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
        await pilot.press("slash")
        prompt = app.query_one("#logs-prompt", Input)
        text = "grad_norm 1.1"  # one burst of keys: typing is not what the snapshot shows
        await type_text(pilot, text, lambda: prompt.value == text, "the search typed")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def stale_fleet() -> ClusterSnapshot:
    """Four nodes read 2 s ago by Ray's reporter, one of them last heard from 14 s ago (stale)."""
    snap = snapshot(4, 8, dead=(), no_telemetry=())
    nodes = [
        n.model_copy(update={"telemetry_age_s": 14.0 if i == 2 else 2.0}) for i, n in enumerate(snap.nodes)
    ]
    return snap.model_copy(update={"nodes": nodes})


def test_fleet_with_a_stale_node_snapshot(snap_compare, tmp_path):
    app = make_app(tmp_path)

    async def run_before(pilot) -> None:
        app.query_one(RunView).clock = lambda: T0 + 1
        await pilot.press("2")
        app.post_message(SnapshotArrived(stale_fleet()))
        app.post_message(RunStateChanged(status()))
        await until(pilot, lambda: "stale: last reading 15s ago" in _fleet_text(app), "the stale row drawn")

    assert snap_compare(app, terminal_size=(100, 24), run_before=run_before)


def _fleet_text(app) -> str:
    fleet = app.query_one(GpuFleet)
    return "\n".join(fleet.render_line(y).text for y in range(len(fleet.rows) + 1))
