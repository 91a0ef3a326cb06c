"""Plan view -> preflight -> L -> confirm -> the run is RUNNING on the real loopback Ray cluster.

The simulated trainer (backend/demo/simtrainer) stands in for miles; the rest is real: the rule engine,
preflight against the cluster, RunController.launch over HTTP, the audit log. The run is stopped at
the end so the shared cluster is left clean.
"""

from __future__ import annotations

import pytest
from app_helpers import RUN_ID, PilotApp
from runhelp import sim_spec, stop_quietly
from textual.widgets import Button
from waiting import until

from backend.cluster.audit import AuditLog
from backend.cluster.controller import RunController
from backend.cluster.dashboard import RayClient
from backend.plan.spec import dump_toml
from backend.settings import Settings
from console.views.plan import PlanView
from console.widgets.confirm import ConfirmModal

pytestmark = pytest.mark.ray


async def test_plan_preflight_launch_confirm_running(ray_cluster, tmp_path):
    spec = sim_spec(tmp_path, nodes=1)
    preset = tmp_path / "plan.toml"
    preset.write_text(dump_toml(spec), encoding="utf-8")
    state = tmp_path / "state"
    settings = Settings(address=ray_cluster.address, state_dir=state, preset=str(preset))
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        controller = RunController(client, state_dir=state)
        app = PilotApp(
            settings, start_workers=False, watchdog=False, preview_run_id=RUN_ID + "1", controller=controller
        )
        job_id = None
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                plan = app.query_one(PlanView)
                assert plan.variant_key is not None and plan.variant_key.startswith("file:")
                await pilot.press("p")
                await until(
                    pilot, lambda: plan.preflight_state not in ("running", "not checked"), "preflight"
                )
                assert plan.preflight_state == "passed", plan.preflight_findings or plan.preflight_note
                assert plan.launch_blockers() == []
                await pilot.press("L")
                await pilot.pause()
                assert isinstance(app.screen, ConfirmModal)
                await pilot.press("right")
                assert isinstance(app.focused, Button) and app.focused.id == "confirm"
                await pilot.press("enter")
                await until(
                    pilot,
                    lambda: any(n.message.startswith("launched ") for n in app._notifications),
                    "the launch notice",
                    timeout=90,
                )
                entries = [e for e in AuditLog(state).entries() if e.action == "launch"]
                assert entries and entries[-1].result == "submitted"
                job_id = entries[-1].job
                assert job_id is not None
                assert job_id.endswith(RUN_ID + "1")  # what was previewed is what was launched
                assert app.preview_run_id != RUN_ID + "1"  # the next launch would be a new run
                assert app.current_view == "run"  # the operator is taken to watch it

                async def running() -> bool:
                    return (await client.get_job(job_id)).status == "RUNNING"

                await until(pilot, running, "the job to reach RUNNING", 90, interval=0.5)
        finally:
            if job_id is not None:
                await stop_quietly(client, job_id)


async def test_failed_preflight_blocks_launch_until_the_spec_changes(ray_cluster, tmp_path):
    spec = sim_spec(tmp_path, nodes=len(ray_cluster.node_ids) + 5)  # more nodes than the cluster has
    preset = tmp_path / "plan.toml"
    preset.write_text(dump_toml(spec), encoding="utf-8")
    settings = Settings(address=ray_cluster.address, state_dir=tmp_path / "state", preset=str(preset))
    app = PilotApp(settings, start_workers=False, watchdog=False, preview_run_id=RUN_ID)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = app.query_one(PlanView)
        await pilot.press("p")
        await until(pilot, lambda: plan.preflight_state not in ("running", "not checked"), "preflight")
        assert plan.preflight_state == "failed"
        assert any(f.rule == "P1" and f.severity == "error" for f in plan.preflight_findings)
        assert "preflight failed" in plan.launch_blockers()
        assert plan.check_action("launch", ()) is None
        await pilot.press("L")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        plan.edits["cluster.nodes"] = "1"
        plan.rebuild()
        assert plan.preflight_state == "stale" and "preflight failed" not in plan.launch_blockers()
