"""The prepare screen against the real loopback Ray cluster: P in the plan view checks every node, the verdict
lands in the plan's preflight (rule P8, one finding per node not ready), and F fetches with progress per node
from a loopback fake of the hub."""

from __future__ import annotations

from typing import Any

import pytest
from app_helpers import make_app
from fake_hub import DATASET_FILE, DATASET_REPO, MODEL_REPO, FakeHub, dataset_files, model_files, write_files
from textual.app import App
from textual.widgets import Log
from waiting import until

from backend.plan.spec import build_spec
from console.views.plan import PlanView
from console.widgets.prepare_screen import PrepareScreen

pytestmark = pytest.mark.ray


def _prepare_screen(app: App[Any]) -> PrepareScreen:
    assert isinstance(app.screen, PrepareScreen)
    return app.screen


async def test_prepare_key_puts_the_per_node_verdict_into_preflight(ray_cluster, tmp_path, monkeypatch):
    app = make_app(tmp_path / "state", address=ray_cluster.address)
    async with app.run_test(size=(140, 44)) as pilot:
        plan = app.view("plan")
        assert isinstance(plan, PlanView)
        await until(pilot, lambda: plan.evaluation.spec is not None or plan.evaluation.valid, "a plan")
        await pilot.press("P")
        await until(pilot, lambda: isinstance(app.screen, PrepareScreen), "the prepare screen")
        screen = _prepare_screen(app)
        await until(
            pilot, lambda: not screen.running and screen.verdict.startswith("NOT READY"), "a verdict", 120
        )
        await until(
            pilot, lambda: plan.preflight_state == "failed", "the plan's preflight to take the verdict"
        )
        p8 = [f for f in plan.preflight_findings if f.rule == "P8"]
        assert len(p8) == len(ray_cluster.node_ids)
        names = [f"sim-node-{i} (" for i in range(len(ray_cluster.node_ids))]  # backend/node_names.py
        assert all(any(n in f.message for f in p8) for n in names), p8
        assert all(" is not ready: missing: " in f.message for f in p8), p8
        assert not any(
            f.rule in ("P4", "P5") for f in plan.preflight_findings
        )  # the per-node check replaces them

        # F: fetch into node-specific directories from the fake hub, with progress per node on screen
        hub = FakeHub(
            {("model", MODEL_REPO): model_files(), ("dataset", DATASET_REPO): dataset_files()}
        ).start()
        try:
            monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
            root = tmp_path / "nodes"
            write_files(root / ray_cluster.node_ids[0] / "models" / MODEL_REPO.split("/")[1], model_files())
            spec = build_spec(
                "nemotron-3-ultra-550b-a55b-4layer",
                [
                    f"paths.model_dir={root}/{{node_id}}/models",
                    f"paths.data_dir={root}/{{node_id}}/data",
                    f"model.name={MODEL_REPO.split('/')[1]}",
                    f"data.prompt_data=tiny-math/{DATASET_FILE}",
                    f"data.repo={DATASET_REPO}",
                ],
            )
            await pilot.press("escape")
            app.push_screen(PrepareScreen(spec, plan))
            await until(
                pilot,
                lambda: isinstance(app.screen, PrepareScreen) and app.screen is not screen,
                "a new screen",
            )
            screen = _prepare_screen(app)
            await until(
                pilot, lambda: not screen.running and screen.verdict.startswith("NOT READY"), "a verdict", 120
            )
            await pilot.press("F")
            await until(
                pilot, lambda: not screen.running and screen.verdict.startswith("READY"), "the fetch", 180
            )
            lines = screen.query_one(Log).lines
            for i in range(1, len(ray_cluster.node_ids)):
                tag = (
                    f"[sim-node-{i} (127.0.0.1)] checkpoint: "  # the node's one name (backend/node_names.py)
                )
                assert any(tag in ln and "complete" in ln for ln in lines), lines
            assert any("verdict: READY (3 of 3 node(s) ready)" in ln for ln in lines)
            await until(pilot, lambda: not any(f.rule == "P8" for f in plan.preflight_findings), "P8 gone")
        finally:
            hub.stop()
