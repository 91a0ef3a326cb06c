"""The Run view against a real simulated miles run on the loopback Ray cluster: with a dump dir present its
charts come from miles' events (each chart says so) and equal what the log alone gives; without one, from the
log. The app runs its real workers (attach, log follow, structured feed)."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from runhelp import job_reaches
from waiting import until

from backend.cluster.dashboard import RayClient
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.settings import Settings
from backend.signals.chart_specs import load_charts
from backend.signals.monitor import MetricsSnapshot, RunMonitor
from console.app import UltraConsoleApp
from console.commands.metrics import read_log_file
from console.views.run import RunView
from console.widgets.charts import LineChart

pytestmark = pytest.mark.ray

CHARTS = tuple(f"#chart-{spec.id}" for spec in load_charts().run_charts)  # configs/charts.toml
COMPARED = (
    "perf/tokens_per_gpu_per_sec",
    "perf/rollout_time",
    "perf/train_time",
    "train/ppo_kl",
    "train/train_rollout_kl",
    "rollout/raw_reward",
)


async def _finished_sim(address: str, tmp: Path, *extra: str) -> tuple[str, str]:
    """A finished 3-rollout simulated run (2 steps per rollout) and its whole job log, saved to a file."""
    sid = f"ultra-console-src-{uuid.uuid4().hex[:8]}"
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--rollout-num-gpus",
        "8",
        "--num-rollout",
        "3",
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
        "--sim-step-seconds",
        "0.3",
        *extra,
    ]
    async with RayClient(address, timeout=30.0) as client:
        await client.submit(
            {"entrypoint": shlex.join(argv), "submission_id": sid, "metadata": {"ultra_console": "1"}}
        )
        job = await job_reaches(client, sid, timeout=120)
        assert job.status == "SUCCEEDED", job.message
        text = "".join([line + "\n" async for line in client.read_log(sid)])
    path = tmp / f"{sid}.log"
    path.write_text(text, encoding="utf-8")
    return sid, str(path)


def _log_only(path: str) -> RunMonitor:
    monitor = RunMonitor()
    read_log_file(monitor, Path(path))
    return monitor


def series_points(metrics: MetricsSnapshot | None, key: str) -> tuple[tuple[float, float], ...]:
    series = metrics.series.get(key) if metrics is not None else None
    return series.finite_points() if series is not None else ()


async def _charts(app: UltraConsoleApp, pilot, want: str, timeout: float = 60.0) -> dict[str, LineChart]:
    await pilot.press("2")
    view = app.query_one(RunView)
    charts = {cid: view.query_one(cid, LineChart) for cid in CHARTS}
    await until(
        pilot,
        lambda: (
            all(c.title.endswith(f"· from {want}") for c in charts.values())
            and len(series_points(view.metrics, "train/ppo_kl")) == 6
        ),
        f"every chart drawn from {want}",
        timeout,
    )
    return charts


async def test_charts_come_from_events_and_equal_the_logs(ray_cluster, tmp_path):
    dump = tmp_path / "dump_details"
    sid, log = await _finished_sim(ray_cluster.address, tmp_path, "--dump-details", str(dump))
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 48)) as pilot:
        charts = await _charts(app, pilot, "events")
        view = app.query_one(RunView)
        assert view.metrics is not None
        assert {view.metrics.sources[k] for k in COMPARED} == {"events"}
        assert charts["#chart-kl"].title == "KL / reward · from events"
        from_log = _log_only(log).metrics_snapshot()
        for key in COMPARED:
            assert series_points(view.metrics, key) == series_points(from_log, key), key
        assert len(series_points(view.metrics, "perf/rollout_time")) == 3
        drawn = {s.label: s.points for s in charts["#chart-kl"].series}
        assert drawn["ppo_kl"] == series_points(from_log, "train/ppo_kl")


async def test_without_a_dump_dir_the_charts_say_log(ray_cluster, tmp_path):
    sid, log = await _finished_sim(ray_cluster.address, tmp_path)
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await _charts(app, pilot, "log")
        view = app.query_one(RunView)
        assert view.metrics is not None
        assert set(view.metrics.sources.values()) == {"log"}
        assert series_points(view.metrics, "train/ppo_kl") == series_points(
            _log_only(log).metrics_snapshot(), "train/ppo_kl"
        )


async def test_old_shape_run_with_a_dump_dir_fills_the_charts_from_events(ray_cluster, tmp_path):
    """Whatever the log's shape (here miles of April 2026), the events fill KL and throughput."""
    sid, _ = await _finished_sim(
        ray_cluster.address,
        tmp_path,
        "--sim-log-format",
        "2026-04",
        "--dump-details",
        str(tmp_path / "dump_details"),
    )
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 48)) as pilot:
        charts = await _charts(app, pilot, "events")
        tput = {s.label: s.points for s in charts["#chart-throughput"].series}
        assert len(tput["per GPU"]) == 3 and len(tput["cluster tok/s"]) == 3
        kl = {s.label: s.points for s in charts["#chart-kl"].series}
        assert [x for x, _ in kl["ppo_kl"]] == [0, 1, 2, 3, 4, 5] and len(kl["raw reward"]) == 3


async def test_old_shape_log_alone_fills_kl_and_throughput(ray_cluster, tmp_path):
    sid, _ = await _finished_sim(ray_cluster.address, tmp_path, "--sim-log-format", "2026-04")
    app = PilotApp(
        Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await _charts(app, pilot, "log", timeout=20.0)
        view = app.query_one(RunView)
        assert len(series_points(view.metrics, "perf/tokens_per_gpu_per_sec")) == 3
