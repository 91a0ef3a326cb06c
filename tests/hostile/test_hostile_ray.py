"""Hostile input, round 2 (issue 36), on the real loopback Ray cluster: two launches that race, and a job
whose submission id holds characters a terminal, a file name or a URL would choke on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runhelp import REPO, cli_env, spec_args, stop_quietly
from waiting import until

from backend.cluster.audit import AuditLog
from backend.cluster.dashboard import RayClient
from backend.cluster.job_identity import active_runs
from backend.cluster.launch_claim import CLAIM_ID

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="session")]


def _launcher(addr: str, state: Path, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "console.cli",
            "--address",
            addr,
            "launch",
            *spec_args(tmp),
            "--yes",
            "--json",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(state),
        stdin=subprocess.DEVNULL,
    )


async def _no_run_active(client: RayClient) -> bool:
    return not active_runs(await client.list_jobs())


async def test_two_simultaneous_launches_leave_exactly_one_active_run(ray_cluster, tmp_path: Path) -> None:
    addr = ray_cluster.address
    async with RayClient(addr, timeout=30.0) as client:
        await until(None, lambda: _no_run_active(client), "no run active before the race", 90, interval=1.0)
        both = [_launcher(addr, tmp_path / f"state{i}", tmp_path) for i in (0, 1)]
        outs = [p.communicate(timeout=180) for p in both]
        codes = sorted(p.returncode for p in both)
        active = active_runs(await client.list_jobs())
        try:
            assert len(active) == 1, [(j.id, j.status) for j in active]
            assert codes == [0, 2], outs
            loser = next(err for (out, err), p in zip(outs, both, strict=True) if p.returncode == 2)
            assert "launch refused" in loser and active[0].id in loser, loser
            assert "Traceback" not in loser
            claim = await client.get_job(CLAIM_ID)
            assert claim.is_terminal or claim.status in ("RUNNING", "PENDING")  # a console tool, never a run
            winner = next(i for i, p in enumerate(both) if p.returncode == 0)
            results = [(e.result, e.job) for e in AuditLog(tmp_path / f"state{winner}").entries()]
            # the intent is on disk before the submit, the outcome after it
            assert [r for r, _ in results][-2].startswith("submitting") and results[-1] == (
                "submitted",
                active[0].id,
            )
            assert json.loads(outs[winner][0].strip().splitlines()[-1])["job"] == active[0].id
        finally:
            for job in active:
                await stop_quietly(client, job.id)


# Ids a hostile submitter might pick: a bell, an OSC escape, a bidi override, a space, CJK at length. (Ray
# accepts `?`, `#` and `/` at submit too, but its own head-to-agent stop call cannot route them: those are
# covered by the escaping test in tests/hostile/test_launch_claim.py.) The test uses the first id Ray serves.
ODD_IDS = [
    "ultra\x07 odd\x1b]8;;x \u202eevil 字" + "长" * 40,
    "ultra\x07odd\u202e",
]


async def _submit_odd(client: RayClient) -> str:
    """Submit a sleeping job (no run: no metadata, no resources, it ends by itself) under each odd id until
    Ray's own job route serves one; returns that id."""
    from backend.cluster.dashboard import RayApiError

    entry = "python3 -c \"import time; print('odd job up', flush=True); time.sleep(120)\""
    refused = []
    for sid in ODD_IDS:
        try:
            await client.submit({"submission_id": sid, "entrypoint": entry})
            await client.get_job(sid)
            return sid
        except RayApiError as err:
            refused.append(str(err))
    raise AssertionError(f"Ray served no odd id: {refused}")


async def test_every_command_works_on_a_job_id_with_control_bidi_and_url_characters(
    ray_cluster, tmp_path: Path
) -> None:
    from runhelp import cli

    addr, state = ray_cluster.address, tmp_path / "state"
    async with RayClient(addr, timeout=30.0) as client:
        sid = await _submit_odd(client)
        try:
            assert "\x07" in sid
            await until(None, lambda: _is_running(client, sid), "the odd job RUNNING", 90, interval=0.5)
            status = cli(addr, state, f"--job={sid}", "status", "--json")
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["job"] == sid
            shown = cli(addr, state, f"--job={sid}", "status")
            assert shown.returncode == 0 and "\x07" not in shown.stdout and "\u202e" not in shown.stdout
            logs = await until(
                None, lambda: _logs_hold(addr, state, sid), "the odd job's log", 60, interval=1.0
            )
            assert "Traceback" not in logs.stderr
            metrics = cli(addr, state, f"--job={sid}", "metrics", "--json")
            assert "Traceback" not in metrics.stderr and "internal error" not in metrics.stderr, (
                metrics.stderr
            )
            assert (
                json.loads(metrics.stdout)["alerts"] is not None
            )  # read (a log without metrics: blind spots)
            stacks = cli(addr, state, f"--job={sid}", "stacks", "--json", timeout=180)
            assert "Traceback" not in stacks.stderr and "internal error" not in stacks.stderr, stacks.stderr
            saved = Path(json.loads(stacks.stdout)["saved_to"])
            assert saved.is_file() and saved.parent.is_relative_to(state) and saved.name.isascii()
            assert "\x07" not in saved.read_text(encoding="utf-8")  # the id is in it, sanitised
            abort = cli(addr, state, f"--job={sid}", "abort", "--yes")
            assert abort.returncode == 0, abort.stderr
            assert "ended STOPPED" in abort.stdout and "\x07" not in abort.stdout + abort.stderr
            assert (await client.get_job(sid)).status == "STOPPED"
            entry = [e for e in AuditLog(state).entries() if e.action == "abort"][-1]
            assert entry.job == sid  # kept exact as data; the file itself holds only ASCII
            assert (state / "audit.jsonl").read_bytes().isascii()
        finally:
            await stop_quietly(client, sid)


async def _is_running(client: RayClient, sid: str) -> bool:
    return (await client.get_job(sid)).status == "RUNNING"


def _logs_hold(addr: str, state: Path, sid: str) -> subprocess.CompletedProcess[str] | None:
    from runhelp import cli

    proc = cli(addr, state, f"--job={sid}", "logs")
    assert proc.returncode == 0, proc.stderr
    return proc if "odd job up" in proc.stdout else None


async def test_a_spool_the_app_cannot_keep_is_one_notice_never_loading_without_end(
    ray_cluster, tmp_path: Path
) -> None:
    """A FIFO where the attached job's log spool goes (a full or special-file state dir reads the same): the
    app says so once and the history is marked done. Before: the log worker died in silence, and the Logs view
    said "loading history… 0 lines" for the rest of the session."""
    import os

    from app_helpers import MODELS, RUN_ID, PilotApp

    from backend.settings import Settings
    from console.views.logs import LogsView

    sid = "ultra-console-spool-fifo"
    state = tmp_path / "app"
    (state / "logs").mkdir(parents=True)
    os.mkfifo(state / "logs" / f"{sid}.log")
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        entry = "python3 -c \"import time; print('up', flush=True); time.sleep(60)\""
        await client.submit({"submission_id": sid, "entrypoint": entry})
        try:
            app = PilotApp(
                Settings(address=ray_cluster.address, state_dir=state),
                job=sid,
                watchdog=False,
                preview_run_id=RUN_ID,
                model_dir=str(MODELS),
            )
            async with app.run_test(size=(140, 40)) as pilot:
                said = await until(
                    pilot,
                    lambda: [n.message for n in app._notifications if "cannot be kept" in n.message],
                    "the notice that the log cannot be kept",
                    60,
                )
                assert "not a regular file" in said[0] and len(said) == 1
                logs = app.query_one(LogsView)
                assert "loading history" not in logs.history
                await pilot.press("q")
        finally:
            await stop_quietly(client, sid)
