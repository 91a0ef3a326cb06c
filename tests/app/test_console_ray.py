"""The app against the real loopback Ray cluster: attach to a job, follow its log, poll telemetry
only while the fleet shows, and abort -> graceful stop -> STOPPED through the modal."""

from __future__ import annotations

import time

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from textual.widgets import Static
from waiting import until

from backend.cluster.controller import RunPhase
from backend.cluster.dashboard import RayClient
from backend.settings import Settings
from console.views.logs import LogsView
from console.views.run import RunView
from console.widgets.abort_modal import AbortModal
from console.widgets.gpu_fleet import GpuFleet

pytestmark = pytest.mark.ray

# A driver that logs a line every 0.1 s and exits cleanly on SIGINT (what miles does on Ray's stop).
ENTRY = (
    'python3 -u -c "import signal, sys, time\n'
    "signal.signal(signal.SIGINT, lambda *a: (print('got SIGINT, saving nothing, bye', flush=True), "
    "sys.exit(0)))\ni = 0\n"
    "while True:\n"
    "    print(f'tick {i} \\x1b[31mred\\x1b[0m', flush=True); i += 1; time.sleep(0.1)\n\""
)


async def test_attach_follow_telemetry_and_abort_to_stopped(ray_cluster, tmp_path):
    sid = f"ultra-console-test-abort-{int(time.time() * 1000)}"
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        await client.submit(
            {
                "entrypoint": ENTRY,
                "submission_id": sid,
                "metadata": {"ultra_console": "1"},
                "runtime_env": {
                    "env_vars": {"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": "15"}
                },
            }
        )
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        run = app.query_one(RunView)
        await until(
            pilot,
            lambda: app.controller is not None and app.controller.state is RunPhase.RUNNING,
            "the job RUNNING",
        )
        fleet = app.query_one(GpuFleet)
        await until(pilot, lambda: app.current_view == "run", "opened on an active run: the run view")
        await until(pilot, lambda: len(fleet.rows) == len(ray_cluster.node_ids), "a telemetry snapshot")
        assert all(r.gpus is not None and len(r.gpus) == 8 for r in fleet.rows if r.alive)
        assert sid in str(run.query_one("#run-state", Static).content)
        await pilot.press("3")
        logs = app.query_one(LogsView)
        await until(pilot, lambda: logs.lines.count > 20, "log lines")
        text = logs.lines.record(logs.lines.count - 1).text
        assert text.startswith("tick ") and "\x1b" not in text  # sanitised by the store
        await pilot.press("slash", *"tick 7", "enter")
        await until(pilot, lambda: bool(logs.matches), "search hits")
        assert logs.lines.record(logs.lines.cursor).text.startswith("tick 7")
        await pilot.press("2", "A")
        await until(pilot, lambda: isinstance(app.screen, AbortModal), "the abort modal")
        modal = app.screen
        assert isinstance(modal, AbortModal)
        assert app.focused is modal.query_one("#abort-cancel")
        await pilot.press("right", "enter")  # graceful stop
        await until(pilot, lambda: modal.stage == "done", "graceful stop to finish", timeout=90)
        assert app.controller is not None and app.controller.state is RunPhase.STOPPED
        assert modal.result == "stopped"
        body = str(modal.query_one("#abort-body", Static).content)
        assert "STOPPED" in body and "No leftover GPU processes" in body, (
            body
        )  # read on the node, after the end
        # under the modal the run view kept telling the truth: STOPPED, how long it ran, no ETA
        await until(
            pilot, lambda: "STOPPED" in str(run.query_one("#run-state", Static).content), "state line STOPPED"
        )
        assert app.screen is modal
        line = str(run.query_one("#run-state", Static).content)
        assert "  ran " in line and "ETA" not in line, line
        await pilot.press("enter")
        await until(
            pilot,
            lambda: any(
                "got SIGINT" in logs.lines.record(i).text
                for i in range(max(0, logs.lines.count - 5), logs.lines.count)
            ),
            "the driver's goodbye line (graceful, not killed)",
        )
