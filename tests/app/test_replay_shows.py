"""What a replay shows that is the replayed run's own, and nothing that is this machine's: no GPU pane (this
cluster's GPUs are not the run's), no audit log (this machine's consoles did not launch it), and the run's
elapsed time by its log's clock (first to newest timestamp), never the wall clock of the replay."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from app_helpers import make_app, write_audit
from textual.widgets import DataTable
from waiting import until

from backend.cluster.durations import fmt_duration
from backend.demo import sample_log
from backend.settings import Settings
from backend.signals.replay import ReplaySession, detect_source
from console.app import UltraConsoleApp
from console.views.events import EventsView
from console.views.run import RunView
from console.widgets.gpu_fleet import GpuFleet
from console.widgets.key_bar import KeyBar

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})")
A_YEAR_LATER = 365 * 86400.0


def logged_seconds(path: Path) -> float:
    """From the log's first timestamp to its newest one,
    read off the file (Ray prints workers out of order)."""
    stamps = [datetime.fromisoformat(s) for s in _STAMP.findall(path.read_text())]
    return (max(stamps) - stamps[0]).total_seconds()


def replay_of(tmp_path: Path) -> tuple[UltraConsoleApp, Path]:
    path = tmp_path / "job-driver.log"
    sample_log.write(path, sample_log.SampleRun(rollouts=5, noise_per_rollout=12))
    write_audit(tmp_path / "state")  # this machine's consoles did things: none of them is the replayed run's
    session = ReplaySession(detect_source(path), tmp_path / "spool")
    return UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False), path


async def shown(app: UltraConsoleApp, pilot, key: str, name: str) -> Any:
    """Press the view's number key; the view once it is the one shown."""
    await pilot.press(key)
    await until(pilot, lambda: app.current_view == name and app.view(name).is_mounted, f"the {name} view")
    return app.view(name)


async def test_replay_has_no_gpu_pane_and_its_clock_is_the_logs(tmp_path):
    app, path = replay_of(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await shown(app, pilot, "2", "run")
        assert isinstance(run, RunView)
        run.clock = lambda: A_YEAR_LATER + 1.8e9  # the replay's wall clock says nothing about the run
        expected = f"elapsed {fmt_duration(logged_seconds(path))}"
        state = run.query_one("#run-state")
        await until(pilot, lambda: expected in str(state.render()), f"the state line saying {expected!r}")
        assert not run.query_one(GpuFleet).display
        assert run.query_one("#run-charts").region.y <= 2  # the charts took the pane's room


async def test_a_dump_replays_clock_is_its_events(tmp_path):
    """A `--dump-details` directory has no log lines of its own: its events' timestamps are its clock."""
    events = tmp_path / "run" / "dump_details" / "events"
    events.mkdir(parents=True)
    rows = [
        {
            "timestamp": f"2026-08-21T10:{minute:02d}:00+00:00",
            "source": {"component": "rollout_manager"},
            "type": "metric",
            "rollout_id": i,
            "attempt": 0,
            "metrics": {"perf/rollout_time": 30.0, "rollout/step": i},
        }
        for i, minute in enumerate((0, 7, 19))
    ]
    (events / "rollout_manager.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    session = ReplaySession(detect_source(tmp_path / "run"), tmp_path / "spool")
    app = UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    async with app.run_test(size=(120, 40)) as pilot:
        run = await shown(app, pilot, "2", "run")
        run.clock = lambda: A_YEAR_LATER + 1.8e9
        state = run.query_one("#run-state")
        await until(
            pilot, lambda: "elapsed 19m00s" in str(state.render()), "the state line saying 19 minutes"
        )


async def test_replay_shows_no_audit_log_of_this_machine(tmp_path):
    app, _ = replay_of(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        events = await shown(app, pilot, "4", "events")
        assert isinstance(events, EventsView)
        await app.workers.wait_for_complete()
        audit = events.query_one("#audit", DataTable)
        assert not audit.display and not events.query_one("#audit-title").display
        assert len(events.audit) == 0 and audit.row_count == 0
        await pilot.pause()
        keys = app.query_one(KeyBar).render().plain  # the audit's own keys go with it
        assert "4 Events" in keys and "Copy entry" not in keys and "Refresh" not in keys


async def test_a_live_console_shows_both(tmp_path):
    """The contrast: the same views outside a replay keep the fleet and this machine's audit log."""
    write_audit(tmp_path / "state")
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        assert app.view("run").query_one(GpuFleet).display
        await pilot.press("4")
        events = app.view("events")
        await until(pilot, lambda: events.query_one("#audit", DataTable).row_count == 2, "the audit rows")
        assert "Copy entry" in app.query_one(KeyBar).render().plain
