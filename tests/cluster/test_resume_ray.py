"""Resume on the real Ray cluster (issue 30): a simulated run dies of a train CUDA OOM after its first
checkpoints; `resume --json` shows the fix, the checkpoint and the advice and launches nothing; `resume --yes`
launches attempt 2 with the fix accepted, from that checkpoint (the simulator prints the step it loaded),
carrying the changed field, linked to attempt 1 in its metadata and the audit log; and a foreign `ray job
submit` of the trainer is resumed from its argv with its unmapped flags listed.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from runhelp import cli, job_reaches, launch_when_free, sim_spec
from textual.widgets import Static
from waiting import until

from backend.cluster.audit import AuditLog
from backend.cluster.controller import RunController
from backend.cluster.dashboard import RayClient
from backend.plan.submission import build_submission
from backend.settings import Settings
from console.views.run import RunView

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="session")]

# dies in rollout 2's train step, after the saves of iterations 1 and 2; only while max tokens > 512
SIM = "--sim-fail train-oom --sim-fail-at-rollout 2 --sim-oom-above-tokens 512"
MORE = ["checkpoint.save_interval=1", "batch.num_rollout=4"]


def _json(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


async def _resumed(address: str, state: Path, job_id: str) -> dict:
    """`resume --yes --json`, again while preflight still sees the dead run's GPUs (readings lag 5-7 s)."""

    async def launched() -> dict | None:
        proc = cli(address, state, "resume", "--job", job_id, "--yes", "--json")
        out = _json(proc)
        return out if proc.returncode == 0 and out.get("launched") else None

    return await until(None, launched, "resume --yes to launch attempt 2", 90, interval=2.0)


async def _log(client: RayClient, job_id: str) -> str:
    return "".join([line + "\n" async for line in client.read_log(job_id)])


async def _app_on_attempt_2(address: str, state: Path, job_id: str) -> None:
    """The app attached to attempt 2: the Run view's chain line, and C opens the comparison with attempt 1."""
    app = PilotApp(
        Settings(address=address, state_dir=state),
        job=job_id,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        run = app.query_one(RunView)
        await until(pilot, lambda: len(run.attempts.attempts) == 2, "the Run view to read the chain", 60)
        line = str(app.query_one("#run-attempts", Static).content)
        assert "1 FAILED cuda-oom" in line and "2 SUCCEEDED" in line and "(this)" in line, line
        assert "lost: cuda-oom" in line, line
        await pilot.press("C")
        await until(pilot, lambda: run.comparison.active, "C to open the comparison with attempt 1", 90)


async def test_a_train_oom_resumed_with_its_fix_loads_its_checkpoint_and_is_linked(
    ray_client: RayClient, ray_cluster, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    spec = sim_spec(tmp_path, sim=SIM, more=MORE)
    ctl = RunController(ray_client, state_dir=state, poll_s=0.5)
    first = await launch_when_free(ctl, spec)
    first = await job_reaches(ray_client, first.id, {"FAILED"}, 150)
    run_id = str((first.metadata or {})["run_id"])
    save_dir = f"{spec.paths.output_dir}/{run_id}/checkpoints"

    shown = cli(ray_cluster.address, state, "resume", "--job", first.id, "--json")
    assert shown.returncode == 0, shown.stderr
    plan = _json(shown)
    assert plan["spec_source"] == "metadata" and plan["cause"]["id"] == "cuda-oom"
    diff = {d["field"]: d for d in plan["diff"]}
    assert (
        diff["batch.max_tokens_per_gpu"]["before"] == "1024"
        and diff["batch.max_tokens_per_gpu"]["after"] == "512"
    )
    assert diff["batch.max_tokens_per_gpu"]["accepted"] and not diff["train.pp"]["accepted"]
    assert plan["checkpoint"]["iteration"] == 2 and plan["checkpoint"]["save_dir"] == save_dir
    assert plan["advice"]["action"] == "CHANGE" and plan["launchable"] and "launched" not in plan
    assert [
        j.id for j in await ray_client.list_jobs() if (j.metadata or {}).get("chain")
    ] == []  # none launched

    out = await _resumed(ray_cluster.address, state, first.id)
    second_id = out["launched"]["job"]
    second = await job_reaches(ray_client, second_id, {"SUCCEEDED"}, 150)
    log = await _log(ray_client, second_id)
    assert f"successfully loaded checkpoint from {save_dir} [ t 1/1, p 1/1 ] at iteration 2" in log
    tokens = shlex.split(second.entrypoint)
    assert tokens[tokens.index("--max-tokens-per-gpu") + 1] == "512"
    assert tokens[tokens.index("--load") + 1] == save_dir and tokens[tokens.index("--ckpt-step") + 1] == "2"
    meta = second.metadata or {}
    assert meta["chain"] == run_id and meta["attempt"] == "2" and meta["resume_of"] == first.id
    assert meta["resumed_cause"] == "cuda-oom" and meta["resumed_from"] == "iteration 2"
    assert json.loads(meta["spec"])["batch"]["max_tokens_per_gpu"] == 512
    up_s = ((first.end_time or 0) - (first.start_time or 0)) / 1000
    assert 0 <= float(meta["resumed_lost_s"]) < up_s  # from the save of iteration 2 to the OOM: less than all
    entries = AuditLog(state).entries()
    resume = next(e for e in entries if e.action == "resume")
    assert resume.job == second_id and resume.details["resume_of"] == first.id
    assert resume.details["accepted"] == ["batch.max_tokens_per_gpu"]
    assert any(
        e.action == "launch" and e.job == second_id and e.details.get("attempt") == "2" for e in entries
    )

    await _app_on_attempt_2(ray_cluster.address, state, second_id)

    again = _json(cli(ray_cluster.address, state, "resume", "--job", second_id, "--json"))
    assert [a["attempt"] for a in again["attempts"]] == [1, 2] and again["attempt"] == 3
    assert (
        again["attempts"][1]["previous_cause"] == "cuda-oom" and again["attempts"][1]["previous_lost_s"] >= 0
    )


async def test_a_foreign_submit_is_resumed_from_its_argv(
    ray_client: RayClient, ray_cluster, tmp_path: Path
) -> None:
    """A `ray job submit` by hand: no console metadata; its plan is read back from the argv."""
    state = tmp_path / "state"
    spec = sim_spec(tmp_path, sim=SIM, more=MORE)
    sub = build_submission(spec, run_id="261202-120000-001", with_shim=False)  # by hand: no shim upload
    entrypoint = sub.entrypoint + " --seed 7"
    payload = {"entrypoint": entrypoint, "runtime_env": sub.runtime_env, "submission_id": "by-hand-resume-1"}

    async def submitted() -> str | None:
        jobs = await ray_client.list_jobs()
        if any(not j.is_terminal for j in jobs):
            return None
        return await ray_client.submit(payload)

    sid = await until(None, submitted, "the cluster to be free", 60, interval=1.0)
    ended = await job_reaches(ray_client, sid, {"FAILED"}, 150)
    proc = cli(ray_cluster.address, state, "resume", "--job", sid, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = _json(proc)
    assert plan["spec_source"] == "argv" and "--seed 7" in plan["argv"]["unmapped"] and plan["launchable"]
    assert (
        "--sim-fail train-oom" in plan["argv"]["unmapped"]
    )  # the simulator's own flags: no plan field either
    assert plan["checkpoint"]["iteration"] == 2 and plan["cause"]["id"] == "cuda-oom", (
        plan["checkpoint"],
        ended.message,
    )
    assert plan["chain"] == "by-hand-resume-1" and plan["attempt"] == 2
    assert not [
        j for j in await ray_client.list_jobs() if (j.metadata or {}).get("chain") == sid
    ]  # no launch
