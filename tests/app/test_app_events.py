"""Pilot tests of the events view: alerts from AlertsChanged, the audit log from backend.cluster.audit."""

from __future__ import annotations

from app_helpers import AUDIT_ROWS, make_app, write_audit
from textual.widgets import DataTable
from waiting import until

from backend.cluster.audit import AuditLog
from backend.severity import Severity
from backend.signals.alerts import Alert
from console.app import StateLine
from console.messages import AlertsChanged, AuditChanged
from console.views.events import EventsView


async def test_alerts_and_audit_are_shown(tmp_path):
    write_audit(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await app.workers.wait_for_complete()
        await pilot.pause()
        audit = app.query_one("#audit", DataTable)
        assert audit.row_count == len(AUDIT_ROWS)
        assert str(audit.get_row_at(0)[2]) == "abort"  # newest first
        alerts = app.query_one("#alerts", DataTable)
        assert not alerts.display
        app.post_message(
            AlertsChanged(
                [
                    Alert("kl-spike", Severity.WARNING, "train/ppo_kl jumped 8x", step=12.0, count=3),
                    Alert("stall", Severity.ERROR, "rollout stalled 6x its median"),
                ]
            )
        )
        await pilot.pause()
        assert alerts.display and alerts.row_count == 2
        assert str(alerts.get_row_at(0)[2]) == "train/ppo_kl jumped 8x  (×3)"
        assert alerts.get_row_at(0)[1] == "12"
        assert "alerts: 2" in str(app.query_one(StateLine).content)


async def test_audit_refreshes_after_an_action_and_copies(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await app.workers.wait_for_complete()
        audit = app.query_one("#audit", DataTable)
        assert audit.row_count == 0
        AuditLog(tmp_path).record(
            "cleanup", job="j1", command="kill 4242 on node-3", result="killed 1 process"
        )
        app.post_message(AuditChanged())
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert audit.row_count == 1
        audit.focus()
        await pilot.press("c")
        assert app.clipboard == "kill 4242 on node-3"


async def test_the_views_get_copies_of_alerts_the_engine_goes_on_updating(tmp_path):
    """The alert engine updates a firing alert in place (count, last step) on the log worker's thread; what
    the views hold is a copy taken when it was posted."""
    from backend.signals.monitor import RunMonitor
    from console.workers import ConsoleSession

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        session = ConsoleSession(app)
        session.monitor = RunMonitor()
        fired = session.monitor.on_node_dead("ab" * 28, "health check failed")
        assert fired is not None
        session.maybe_post_alerts()
        events = app.view("events")
        assert isinstance(events, EventsView)
        await until(pilot, lambda: len(events.alerts) == 1, "the alert in the events view")
        (shown,) = events.alerts
        assert shown == fired and shown is not fired
        fired.count += 1  # the engine's next sighting of the same episode
        assert shown.count == 1


async def test_a_failure_s_cause_is_listed_above_its_consequences(tmp_path):
    """The driver's ActorDiedError can reach the log before the train actor's OOM that caused it: Events
    lists the cause first, then its consequences, where the first of them fired; other alerts keep place."""
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        app.post_message(
            AlertsChanged(
                [
                    Alert("kl-spike", Severity.WARNING, "train/ppo_kl jumped 8x", step=12.0),
                    Alert("actor-died", Severity.CRITICAL, "the driver saw the train actor die", cause=2),
                    Alert("stall", Severity.ERROR, "rollout stalled 6x its median"),
                    Alert("cuda-oom", Severity.CRITICAL, "CUDA out of memory on GPU 3", cause=1),
                ]
            )
        )
        await pilot.pause()
        table = app.query_one("#alerts", DataTable)
        ids = [str(table.get_row_at(i)[3]) for i in range(table.row_count)]
        assert ids == ["kl-spike", "cuda-oom", "actor-died", "stall"]
        assert str(table.get_row_at(1)[2]).startswith("CAUSE · CUDA out of memory")
