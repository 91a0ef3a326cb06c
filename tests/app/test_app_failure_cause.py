"""Why it died, on screen: a replayed log of a run that died before its first metric shows the cause in the
Run view's header, and the Events view lists the cause (with what to try) and its consequences."""

from __future__ import annotations

from pathlib import Path

from app_helpers import PilotApp, make_app
from failure_shapes import SCENARIOS, render
from miles_log_shapes import OOM_TRACEBACK
from run_fixtures import snapshot, status
from test_gpu_fleet import line_text
from textual.widgets import DataTable, Static
from waiting import until

from backend.settings import Settings
from backend.signals.monitor import RunMonitor
from backend.signals.replay import ReplaySession, detect_source
from console.app import UltraConsoleApp
from console.messages import AlertsChanged, RunStateChanged, SnapshotArrived
from console.widgets.gpu_fleet import GpuFleet


def _events_rows(app: UltraConsoleApp) -> list[str]:
    table = app.view("events").query_one("#alerts", DataTable)
    return [" ".join(str(cell) for cell in table.get_row_at(i)) for i in range(table.row_count)]


async def test_a_run_that_died_at_start_shows_its_cause_and_consequences(tmp_path: Path) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "SGLang engine failed at start")
    log = tmp_path / "job-driver.log"
    log.write_text(render(scenario, "ray"), encoding="utf-8")
    app = PilotApp(
        Settings(state_dir=tmp_path / "state"),
        replay=ReplaySession(detect_source(log), tmp_path / "spool"),
        watchdog=False,
    )
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("2")
        header = app.view("run").query_one("#run-state", Static)
        await until(
            pilot,
            lambda: "failure: SGLang scheduler TP3 in SGLangEngine pid=5300" in str(header.render()),
            lambda: f"the cause in the header (it reads {header.render()!s})",
        )
        await pilot.press("4")
        await until(pilot, lambda: len(_events_rows(app)) >= 4, "the failures in Events")
        rows = _events_rows(app)
        cause = [r for r in rows if "CAUSE · " in r]
        assert len(cause) == 1 and "Not enough memory" in cause[0] and "→ try: " in cause[0]
        assert "rollout.mem_fraction" in cause[0]
        consequences = [r for r in rows if "consequence · " in r]
        assert [r.rsplit(" ", 1)[-1] for r in consequences] == [
            "engine-exit",
            "ray-task-error",
            "python-error",
        ]
        assert any("no-metrics-in-log" in r for r in rows)  # no metric: one alert among the others
        assert all("\x1b" not in r for r in rows)


async def test_the_cause_names_its_node_as_the_gpu_pane_does(tmp_path: Path) -> None:
    """Issue 35: the log says `ip=10.0.0.3`; the pane lists `node-03`. The header, the diagnosis panel and
    Events say `node-03 (10.0.0.3)`, once the cluster's node list has come (also after the cause)."""
    monitor = RunMonitor()
    monitor.feed_text("\n".join(OOM_TRACEBACK) + "\n")
    monitor.on_job_status("FAILED", "exit code 1")
    found = monitor.diagnosis()
    assert found is not None and "on 10.0.0.3" in found.cause.message
    app = make_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("2")
        run = app.view("run")
        app.post_message(RunStateChanged(status("FAILED")))
        app.post_message(AlertsChanged(monitor.alerts.snapshot(), found))
        panel = run.query_one("#run-diagnosis", Static)
        await until(pilot, lambda: "CUDA out of memory" in str(panel.content), "the panel drawn")
        app.post_message(SnapshotArrived(snapshot(16, 8)))
        await until(pilot, lambda: "node-03 (10.0.0.3)" in str(panel.content), "the panel naming node-03")
        assert "· node node-03 (10.0.0.3) ·" in str(panel.content)
        header = str(run.query_one("#run-state", Static).content)
        assert "pid=4101 on node-03 (10.0.0.3)" in header, header
        fleet = [line_text(s) for s in run.query_one(GpuFleet)._strips]
        assert any(line.lstrip().startswith("node-03") for line in fleet), fleet
        await pilot.press("4")
        await until(pilot, lambda: any("CAUSE · " in r for r in _events_rows(app)), "the cause in Events")
        cause = next(r for r in _events_rows(app) if "CAUSE · " in r)
        assert "on node-03 (10.0.0.3)" in cause and " 10.0.0.3:" not in cause, cause
