"""The plan preview helper: its answer is the plan the console would compute itself, bad settings come
back as one line, and any failure of the helper leaves the console to compute the plan (None)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from app_helpers import PilotApp
from waiting import until

from backend.plan import preview_process as plan_preview
from console.app import UltraConsoleApp
from console.views.plan import PlanView

ROOT = Path(__file__).resolve().parents[2]
BASICS = '{"settings": {"address": "http://127.0.0.1:9", "readonly": false, "keys": {}}, "run_id": "r"}'


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text('readonly = true\n[keys]\n"plan.preflight" = "ctrl+t"\n')
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(cfg))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "tok-secret-123")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return cfg


def _started(*, address: str | None = None, python: str | None = None) -> plan_preview.Preview:
    preview = plan_preview.start(address=address, python=python)
    assert preview is not None, "no helper started"
    return preview


def test_helper_answers_what_the_console_computes(config: Path) -> None:
    preview = _started(address="127.0.0.1:7777")
    basics, start = preview.settings_answer(), preview.plan()
    assert isinstance(basics, plan_preview.PreviewBasics) and start is not None
    assert preview._proc.wait(timeout=10) == 0  # it exits by itself once both answers are out
    here = list(plan_preview.helper_lines(address="127.0.0.1:7777"))
    assert plan_preview.parse_settings_answer(here[0]) == dataclasses.replace(
        basics, run_id=here[0]["run_id"]
    )
    plan = start.to_json()
    assert json.dumps(plan).replace(basics.run_id, "RUN") == json.dumps(here[1]["start"]).replace(
        here[0]["run_id"], "RUN"
    )  # the same plan, but for the run id each one drew
    assert (basics.address, basics.readonly, basics.keys) == (
        "http://127.0.0.1:7777",
        True,
        {"plan.preflight": "ctrl+t"},
    )
    assert start.variant == "preset:nemotron-3-ultra-550b-a55b" and start.evaluation.valid
    assert start.evaluation.command.startswith("ray job submit --address=http://127.0.0.1:7777")
    assert basics.run_id in start.evaluation.command
    assert "tok-secret-123" not in json.dumps([here[0], plan])  # the token never leaves the settings


def test_bad_settings_come_back_as_one_line(config: Path) -> None:
    config.write_text("readonly = [\n")
    preview = _started()
    answer = preview.settings_answer()
    assert isinstance(answer, plan_preview.PreviewRefused)
    assert answer.error.startswith("cannot read config file") and "\n" not in answer.error
    assert preview.plan() is None  # nothing follows an error


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_failing_helper_means_the_console_computes(tmp_path: Path) -> None:
    assert plan_preview.start(python=str(tmp_path / "missing")) is None  # cannot start
    assert _started(python=_script(tmp_path, "exit 3")).settings_answer() is None  # died
    assert _started(python=_script(tmp_path, "echo '{not json'")).settings_answer() is None  # garbage
    assert _started(python=_script(tmp_path, "echo '[1, 2]'")).settings_answer() is None  # not an answer
    assert (
        _started(python=_script(tmp_path, """echo '{"settings": {}, "run_id": "r"}'""")).settings_answer()
        is None
    )  # not the shape the console reads
    half = _started(python=_script(tmp_path, f"echo '{BASICS}'; exit 1"))
    assert half.settings_answer() == plan_preview.PreviewBasics("http://127.0.0.1:9", False, {}, "r")
    assert half.plan() is None  # died after the first answer
    keys_not_text = BASICS.replace('"keys": {}', '"keys": {"plan.preflight": 1}')
    assert _started(python=_script(tmp_path, f"echo '{keys_not_text}'")).settings_answer() is None


def test_no_helper_on_a_single_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert plan_preview.start() is None  # the console computes the plan itself: nothing to overlap with
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    preview = _started()
    assert preview is not None and preview.settings_answer() is not None


def test_a_slow_helper_is_given_up_and_killed(tmp_path: Path) -> None:
    preview = _started(python=_script(tmp_path, f"echo '{BASICS}'; exec sleep 30"))
    assert preview is not None and preview.settings_answer(timeout=10) is not None
    t0 = time.monotonic()
    assert preview.plan(timeout=0.5) is None
    assert time.monotonic() - t0 < 5
    assert preview._proc.poll() is not None  # not left running
    assert preview.plan() is None and preview.settings_answer() is not None  # asked again: no second wait


def _screen(app: UltraConsoleApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def test_the_first_frame_from_a_preview_equals_the_computed_one(tmp_path: Path, config: Path) -> None:
    preview = _started()
    basics = preview.settings_answer()
    assert isinstance(basics, plan_preview.PreviewBasics)
    run_id = basics.run_id
    from backend.settings import load_settings

    from_preview = PilotApp(None, preview=preview, start_workers=False, watchdog=False)
    computed = PilotApp(load_settings(), start_workers=False, watchdog=False, preview_run_id=run_id)
    screens = []
    for app in (from_preview, computed):
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            screens.append(_screen(app))
            plan = app.query_one(PlanView)

            def built(plan: PlanView = plan) -> bool:
                return plan.evaluation.spec is not None

            await until(pilot, built, "the spec object is built")
            assert app.readonly and app.keymap_overrides == {"plan.preflight": "ctrl+t"}
        if app is from_preview:
            assert preview._proc.wait(timeout=10) == 0  # its plan was read to the end
    assert screens[0] == screens[1]
    assert any("READ-ONLY" in line for line in screens[0])
    assert (
        from_preview._settings is not None
        and from_preview.settings.token is not None
        and from_preview.settings.token.get_secret_value() == "tok-secret-123"
    )


@pytest.mark.parametrize("cpus", [None, "0"], ids=["helper", "one-cpu-no-helper"])
def test_bad_config_stops_the_console_with_one_line(tmp_path: Path, cpus: str | None) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("readonly = [\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEXTUAL", "PYTEST"))}
    env.update(ULTRA_CONSOLE_CONFIG=str(cfg), ULTRA_CONSOLE_STATE_DIR=str(tmp_path / "state"))
    argv = [sys.executable, "-m", "console.cli"]
    if cpus is not None:
        if shutil.which("taskset") is None:
            pytest.skip("taskset is not installed")
        argv = ["taskset", "-c", cpus, *argv]  # one CPU: no helper, the app loads the settings itself
    proc = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("ultra-console: error: cannot read config file")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
