"""The app against the simulated trainer when a run goes wrong in ways real runs do: it dies of CUDA OOM in
miles' 2026-04 log shape, or its metric lines cannot be read. The header, Events and `status` must say so."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from runhelp import cli, job_reaches, live_app
from textual.widgets import Static
from waiting import until

from backend.cluster.dashboard import RayClient
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.settings import Settings
from console.views.events import EventsView
from console.views.run import RunView

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def _sim_payload(*extra: str) -> dict[str, object]:
    """A 1-node simulated run: 2 steps per rollout (32 prompts x 8 samples / 128)."""
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--rollout-num-gpus",
        "8",
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
        *extra,
    ]
    sid = f"ultra-console-fail-{uuid.uuid4().hex[:8]}"
    return {"entrypoint": shlex.join(argv), "submission_id": sid, "metadata": {"ultra_console": "1"}}


async def test_simulated_cuda_oom_names_its_gpu_in_header_events_and_status(
    ray_cluster, tmp_path: Path
) -> None:
    payload = _sim_payload(
        "--num-rollout",
        "4",
        "--sim-step-seconds",
        "0.3",
        "--sim-log-format",
        "2026-04",
        "--sim-oom-at-rollout",
        "1",
        "--sim-oom-gpu",
        "5",
    )
    sid = str(payload["submission_id"])
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        await client.submit(payload)
        job = await job_reaches(client, sid, timeout=150)
    assert job.status == "FAILED" and "CUDA out of memory" in (job.message or "")

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

        def said() -> str | None:
            text = str(run.query_one("#run-state", Static).content)
            return text if "FAILED: CUDA out of memory on GPU 5" in text else None

        header = await until(
            pilot,
            said,
            lambda: f"the header naming the OOM's GPU; it says {run.query_one('#run-state', Static).content}",
            timeout=120,
        )
        assert "MegatronTrainRayActor" in header  # which actor, read from the 2026-04 prefix
        await pilot.press("4")
        events = app.query_one(EventsView)
        await until(
            pilot,
            lambda: {"cuda-oom", "job-failed"} <= {a.id for a in events.alerts},
            "the OOM and the failure in Events",
            timeout=30,
        )
        (oom,) = [a for a in events.alerts if a.id == "cuda-oom"]
        assert "GPU 5" in oom.message and "2.10 GiB" in oom.message

    info = json.loads(cli(ray_cluster.address, tmp_path / "cli", "--job", sid, "status", "--json").stdout)
    assert (
        info["status"] == "FAILED"
        and info["cause"]["id"] == "cuda-oom"
        and "GPU 5" in info["cause"]["message"]
    )


async def test_unreadable_metric_lines_raise_the_blind_spot_within_one_rollout(
    ray_cluster, tmp_path: Path
) -> None:
    payload = _sim_payload("--num-rollout", "6", "--sim-step-seconds", "2", "--sim-unreadable-metrics")
    sid = str(payload["submission_id"])
    async with live_app(ray_cluster.address, tmp_path / "state", payload) as (client, app, pilot):
        run = app.query_one(RunView)

        def blind() -> bool:
            return "metric line(s) were cut off mid-dict" in str(run.query_one("#run-state", Static).content)

        await until(pilot, blind, "the blind-spot alert in the run header", timeout=150)
        seen = [line async for line in client.read_log(sid)]
        status = (await client.get_job(sid)).status
        # said while the run was live, before its second rollout's metrics were printed
        assert status == "RUNNING", status
        assert not any(re.search(r" - rollout [1-9]\d*: ", line) for line in seen), seen[-5:]
        await pilot.press("4")
        events = app.query_one(EventsView)
        await until(
            pilot,
            lambda: any(a.id == "metrics-cut" for a in events.alerts),
            "the blind spot in Events",
            timeout=30,
        )
        (alert,) = [a for a in events.alerts if a.id == "metrics-cut"]
        assert alert.count >= 1 and re.search(r"(step|rollout|perf) \d+: \{", alert.sample or "")
