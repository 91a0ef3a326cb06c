"""The dead run's screen: the diagnosis panel above the charts, at 80x24 and 200x50, live (a faked live
session, as the run view's snapshots are) and in replay (a log written from miles-log-formats.md §3: an
SGLang engine that died at start, before its first rollout). Update only after looking at the SVGs:
`pytest tests/app/test_dead_run_snapshots.py --snapshot-update`."""

from __future__ import annotations

import pytest
from app_helpers import make_app
from miles_log_shapes import OOM_TRACEBACK
from run_fixtures import T0, status
from textual.widgets import Static
from waiting import until

from backend.settings import Settings
from backend.signals.monitor import RunMonitor
from backend.signals.replay import ReplaySession, detect_source
from console.app import UltraConsoleApp
from console.messages import AlertsChanged, RunStateChanged
from console.views.run import RunView
from console.widgets.charts import LineChart

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def _panel(app) -> str:
    return str(app.view("run").query_one("#run-diagnosis", Static).content)


@pytest.mark.parametrize("size", SIZES)
def test_live_failed_run_diagnosis_panel(snap_compare, tmp_path, size):
    monitor = RunMonitor()
    monitor.feed_text("\n".join(OOM_TRACEBACK) + "\n")
    monitor.on_job_status("FAILED", "exit code 1")
    found = monitor.diagnosis()
    assert found is not None
    app = make_app(tmp_path)

    async def run_before(pilot) -> None:
        app.query_one(RunView).clock = lambda: T0 + 600
        await pilot.press("2")
        app.post_message(RunStateChanged(status("FAILED")))
        app.post_message(AlertsChanged(monitor.alerts.snapshot(), found))
        await until(pilot, lambda: "CUDA out of memory" in _panel(app), "the panel drawn")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


ENGINE_DIED_AT_START = [
    "(SGLangEngine pid=5300, ip=10.0.0.4) [2026-03-02 10:00:00] Scheduler hit an exception: Traceback (most "
    "recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2912, in '
    "run_scheduler_process",
    "    scheduler = Scheduler(",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1311, in '
    "init_memory_pool",
    "    raise RuntimeError(",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "(SGLangEngine pid=5300, ip=10.0.0.4) [2026-03-02 10:00:01] Received sigquit from a child process. It "
    "usually means the child failed.",
]


@pytest.mark.parametrize("size", SIZES)
def test_replayed_failed_run_diagnosis_panel(snap_compare, tmp_path, size):
    """A replay of a run whose engine died at start: the panel leads, the charts say why they stay empty."""
    path = tmp_path / "job-driver.log"
    path.write_text("\n".join(ENGINE_DIED_AT_START) + "\n", encoding="utf-8")
    session = ReplaySession(detect_source(path), tmp_path / "spool")
    app = UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)

    async def run_before(pilot) -> None:
        await pilot.press("2")
        run = app.query_one(RunView)
        await until(pilot, lambda: "Not enough memory" in _panel(app), "the panel drawn")
        await until(
            pilot, lambda: "loading" not in str(run.query_one("#run-state", Static).content), "loaded"
        )
        await until(
            pilot,
            lambda: all(c.note.startswith("no metrics") for c in run.query(LineChart)),
            "the charts saying why",
        )

        def said() -> list[str]:
            return [n.message for n in app._notifications]

        await until(pilot, lambda: any("no miles metric found" in t for t in said()), "the read's end said")
        assert any("Not enough memory" in t for t in said())  # why it died, said wherever the operator is
        app.clear_notifications()  # the snapshot is of the screen, not of toasts that time out
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
