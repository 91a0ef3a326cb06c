"""The app against a real Ray job whose log is in miles' 2026-04 shape (seconds, no process name) and which
dies of CUDA OOM: the KL and throughput charts fill, and the header and Events say why it FAILED."""

from __future__ import annotations

import shlex
import sys
import time

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from miles_log_shapes import OOM_TRACEBACK, Shape, text
from textual.widgets import Static
from waiting import until

from backend.cluster.dashboard import RayClient
from backend.settings import Settings
from console.views.events import EventsView
from console.views.run import RunView
from console.widgets.charts import LineChart

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(420),
]  # above its bounded waits (2 x 120 s and start-up): a slow run fails by a wait, not a kill


async def test_2026_04_log_fills_the_charts_and_a_cuda_oom_is_the_failed_header(ray_cluster, tmp_path):
    script = tmp_path / "run.py"
    lines = text(Shape("2026-04", rollouts=4, colour="esc")).splitlines() + OOM_TRACEBACK
    script.write_text(
        "import sys, time\n"
        f"for line in {lines!r}:\n"
        "    print(line, flush=True)\n"
        "    time.sleep(0.01)\n"
        "time.sleep(2)\n"
        "sys.exit(1)\n",
        encoding="utf-8",
    )
    sid = f"ultra-console-test-shapes-{int(time.time() * 1000)}"
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        await client.submit(
            {
                "entrypoint": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
                "submission_id": sid,
                "metadata": {"ultra_console": "1"},
            }
        )
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        run = app.query_one(RunView)

        def points(chart_id: str, label: str) -> int:
            chart = run.query_one(chart_id, LineChart)
            return sum(len(s.points) for s in chart.series if s.label == label)

        await until(
            pilot,
            lambda: points("#chart-kl", "ppo_kl") == 8 and points("#chart-throughput", "per GPU") == 4,
            "the KL and throughput charts from a 2026-04-shaped log",
            timeout=120,
        )
        oom = (
            "CUDA out of memory on GPU 3 in MegatronTrainRayActor pid=4101 on 10.0.0.3: asked for 2.10 GiB, "
            "1.02 GiB free of 139.80 GiB"
        )
        await until(
            pilot,
            lambda: f"FAILED: {oom}" in str(run.query_one("#run-state", Static).content),
            "the header naming the failure's cause",
            timeout=120,
        )
        await pilot.press("4")
        events = app.query_one(EventsView)
        ids = [a.id for a in events.alerts]
        assert "cuda-oom" in ids and "job-failed" in ids
        (failed,) = [a for a in events.alerts if a.id == "job-failed"]
        assert failed.message.startswith(f"the Ray job failed: {oom}")
