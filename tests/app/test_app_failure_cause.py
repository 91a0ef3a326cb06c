"""Why it died, on screen: a replayed log of a run that died before its first metric shows the cause in the
Run view's header, and the Events view lists the cause (with what to try) and its consequences."""

from __future__ import annotations

from pathlib import Path

from app_helpers import PilotApp
from failure_shapes import SCENARIOS, render
from textual.widgets import DataTable, Static
from waiting import until

from backend.settings import Settings
from backend.signals.replay import ReplaySession, detect_source
from console.app import UltraConsoleApp


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
