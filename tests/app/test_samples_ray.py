"""A live simulated miles run on the loopback Ray cluster, `--dump-details`: the Samples screen (G in the
Run view) shows its newest rollout's groups while it runs and follows each new rollout file; the zero-std
series the alert judges comes from the samples. The app runs its real workers (attach, log follow, the
structured feed)."""

from __future__ import annotations

import asyncio
import json
import shlex
import uuid

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from runhelp import job_reaches
from textual.widgets import DataTable, Static
from waiting import until

from backend.cluster.dashboard import RayClient
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.settings import Settings
from console.cli import main
from console.widgets.samples_screen import SamplesScreen

pytestmark = pytest.mark.ray


def _head(app) -> str:
    return str(app.screen.query_one("#samples-head", Static).content)


async def test_live_run_groups_and_new_rollouts(ray_cluster, tmp_path, capsys):
    dump = tmp_path / "dump_details"
    sid = f"ultra-console-samples-{uuid.uuid4().hex[:8]}"
    run = "--actor-num-nodes 1 --rollout-num-gpus 8 --num-rollout 6"
    run += " --rollout-batch-size 32 --n-samples-per-prompt 8 --global-batch-size 128"
    argv = ["python3", SIM_TRAIN_SCRIPT, *shlex.split(f"{run} --sim-step-seconds 2 --dump-details {dump}")]
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        await client.submit(
            {"entrypoint": shlex.join(argv), "submission_id": sid, "metadata": {"ultra_console": "1"}}
        )
        app = PilotApp(
            Settings(address=ray_cluster.address, state_dir=tmp_path / "state"),
            job=sid,
            watchdog=False,
            preview_run_id=RUN_ID,
            model_dir=str(MODELS),
        )
        try:
            async with app.run_test(size=(160, 48)) as pilot:
                await until(
                    pilot,
                    lambda: (
                        getattr(getattr(app.session, "monitor", None), "samples", None) is not None
                        and (dump / "rollout_data" / "0.pt").exists()
                    ),
                    "the run's first rollout file",
                    timeout=120,
                )
                await pilot.press("2")
                await until(pilot, lambda: app.current_view == "run", "the run view")
                await pilot.press("G")
                await until(pilot, lambda: isinstance(app.screen, SamplesScreen), "the samples screen")
                await until(pilot, lambda: "samples in 32 groups of 8" in _head(app), "a rollout's groups")
                first = _head(app).split(":", 1)[0]
                table = app.screen.query_one("#samples-groups", DataTable)
                assert table.row_count == 32
                await until(
                    pilot,
                    lambda: _head(app).split(":", 1)[0] != first and "groups of 8" in _head(app),
                    "the next rollout followed while the run goes on",
                    timeout=90,
                )
                monitor = getattr(app.session, "monitor", None)
                assert monitor is not None
                zero = monitor.collector.series.get("derived/zero_std_frac")
                assert zero is not None and zero.steps  # from the samples (the log agrees: no gap alert)
                assert not [a for a in monitor.alerts.alerts if a.id == "zero-std-log-wrong"]
            # the headless command finds the same dump through the job's entrypoint
            cli = ["--address", ray_cluster.address, "samples", "--job", sid, "--rollout", "0", "--json"]
            assert await asyncio.to_thread(main, cli) == 0
            out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            assert out["rollout"]["samples"] == 256 and len(out["rollout"]["groups"]) == 32
        finally:
            await client.stop_job(sid)
            await job_reaches(client, sid, timeout=60)
