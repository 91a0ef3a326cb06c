"""The run controller and its CLI against the real loopback Ray cluster (simulated trainer, fake GPUs).

Order matters a little (one shared cluster): every test leaves no run active, and the raylet-kill
test kills a throwaway node it added itself.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runhelp import (
    METRIC_LINE,
    REPO,
    PausableProxy,
    cli,
    cli_env,
    launch_when_free,
    one_line_error,
    sim_spec,
    spec_args,
    stop_quietly,
)
from waiting import holds, until

from backend.cluster.audit import AuditLog
from backend.cluster.controller import LaunchRefused, RunController, RunEvent, RunPhase
from backend.cluster.dashboard import DuplicateSubmission, JobInfo, RayClient
from backend.cluster.telemetry import TelemetryPoller
from backend.plan.submission import build_submission

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="session")]
_ATTEMPTS = itertools.count(1)  # a Ray-tier rerun (tests/conftest.py) meets the cluster its first try used


async def running(ctl: RunController, timeout: float = 90) -> None:
    async def is_running() -> bool:
        await ctl.refresh()
        assert ctl.state is not None and not ctl.state.terminal, ctl.job.message if ctl.job else None
        return ctl.state is RunPhase.RUNNING

    await until(None, is_running, "RUNNING", timeout, interval=0.5)


async def metric_lines(client: RayClient, job_id: str, want: int = 2, limit: int = 5000) -> list[str]:
    found: list[str] = []
    async for line in client.follow_log(job_id):
        if METRIC_LINE.search(line):
            found.append(line)
            if len(found) >= want:
                break
        limit -= 1
        assert limit > 0, "no metric line in the followed log"
    return found


async def start_run(client: RayClient, tmp: Path, **spec_kw: object) -> tuple[RunController, JobInfo]:
    """Launch the simulated trainer with `sim_spec(tmp, **spec_kw)` and wait until it is RUNNING."""
    ctl = RunController(client, state_dir=tmp / "state", poll_s=0.5)
    job = await launch_when_free(ctl, sim_spec(tmp, **spec_kw))  # type: ignore[arg-type]
    try:
        await running(ctl)
    except BaseException:
        await stop_quietly(client, job.id)
        raise
    return ctl, job


async def test_launch_running_metrics_abort_stopped_and_refusals(
    ray_client: RayClient, tmp_path: Path
) -> None:
    # the grace Ray gives SIGINT before its SIGKILL: a bound, never a wait (the driver exits in ~3 s); 15 s
    # was too short on a loaded 2-core CI runner: killed before its "shutting down cleanly" line
    spec = sim_spec(tmp_path, stop_wait_s=45)
    ctl = RunController(ray_client, state_dir=tmp_path / "state", poll_s=0.5)
    events: list[RunEvent] = []
    ctl.subscribe(events.append)
    streamed: list[RunEvent] = []

    async def consume() -> None:  # the async-iterator interface sees the same events
        async for event in ctl.events():
            streamed.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    run_id = f"261130-070000-{next(_ATTEMPTS):03d}"  # a rerun on the same cluster: a fresh submission id
    job = await ctl.launch(spec, run_id=run_id)
    try:
        assert job.id == f"ultra-console-{run_id}" and (job.metadata or {})["ultra_console"] == "1"
        await running(ctl)
        lines = await metric_lines(ray_client, job.id)
        assert all("MegatronTrainRayActor" in ln for ln in lines)

        # a second launch while one is active: refused with the preflight finding, nothing submitted
        with pytest.raises(LaunchRefused) as refused:
            await ctl.launch(sim_spec(tmp_path))
        assert refused.value.exit_code == 2
        assert any(
            f.rule == "P3" and f.severity == "error" and job.id in f.message for f in refused.value.findings
        )
        assert ctl.job is not None and ctl.job.id == job.id  # the controller still follows the first run

        # the same submission id again (forced past P3): Ray refuses it, the first run is untouched
        other = RunController(ray_client, state_dir=tmp_path / "state")
        with pytest.raises(DuplicateSubmission, match="already exists"):
            await other.launch(spec, run_id=run_id, force=True)
        assert (await ray_client.get_job(job.id)).status == "RUNNING"

        outcome = await ctl.abort()
        assert outcome.stop_sent and "SIGINT" in outcome.message and "45 s" in outcome.message
        assert (stopping := ctl.state) is RunPhase.STOPPING, stopping
        final = await ctl.wait_terminal(60)
        assert final.status == "STOPPED" and ctl.state is RunPhase.STOPPED
        # where it ran was recorded while its actors were alive, and the nodes read after the end say clean
        assert ctl.footprint is not None and ctl.footprint.job_id and ctl.footprint.complete
        assert len(ctl.footprint.workers) >= 3  # the driver, RolloutManager and a MegatronTrainRayActor
        report = await ctl.leftovers()
        assert report.clean, report.lines()
        assert {n.node_id for n in report.nodes} == set(ctl.footprint.node_ids)
    finally:
        await stop_quietly(ray_client, job.id)
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    assert [(e.kind, e.state) for e in streamed] == [(e.kind, e.state) for e in events]
    states = [e.state for e in events if e.kind == "state"]
    assert states[0] is RunPhase.SUBMITTING
    order = [s for s in states if s in (RunPhase.RUNNING, RunPhase.STOPPING, RunPhase.STOPPED)]
    assert order == [RunPhase.RUNNING, RunPhase.STOPPING, RunPhase.STOPPED]
    log = [ln async for ln in ray_client.read_log(job.id)]
    driver = [ln for ln in log if "pid=" not in ln[:80]]  # the driver's own lines: where the signal met it
    assert any("KeyboardInterrupt (SIGINT), shutting down cleanly" in ln for ln in log), "\n".join(
        driver[-12:]
    )
    audit = [(e.action, e.job, e.result) for e in AuditLog(tmp_path / "state").entries()]
    # each launch that reached Ray: its intent before the submit, the outcome after
    assert audit[0][:2] == ("launch", job.id) and audit[0][2].startswith("submitting")
    assert audit[1] == ("launch", job.id, "submitted")
    assert audit[2][:2] == ("launch", None) and audit[2][2].startswith("launch refused: [P3]")
    assert audit[3][2].startswith("submitting") and audit[4][0] == "launch"
    assert audit[4][2].startswith("refused by Ray")
    assert audit[5] == ("abort", job.id, "stop requested while RUNNING")


async def test_trainer_ignoring_signals_still_ends_stopped(ray_client: RayClient, tmp_path: Path) -> None:
    ctl, job = await start_run(
        ray_client, tmp_path, sim="--sim-forever --sim-ignore-sigterm --sim-ignore-sigint", stop_wait_s=3
    )
    try:
        await metric_lines(ray_client, job.id, want=1)
        await ctl.abort()
        t0 = time.monotonic()
        final = await ctl.wait_terminal(60)
        assert final.status == "STOPPED"
        assert time.monotonic() - t0 >= 2.0  # it waited out the grace period, then Ray SIGKILLed
    finally:
        await stop_quietly(ray_client, job.id)
    log = [ln async for ln in ray_client.read_log(job.id)]
    assert any("received SIGINT, ignoring it" in ln for ln in log)
    assert not any("shutting down cleanly" in ln for ln in log)


async def test_force_stop_kills_driver_tree_before_grace_ends(ray_client: RayClient, tmp_path: Path) -> None:
    ctl, job = await start_run(ray_client, tmp_path, sim="--sim-forever --sim-ignore-sigint", stop_wait_s=120)
    try:
        await metric_lines(ray_client, job.id, want=1)  # the trainer has installed its signal handlers
        await ctl.abort()

        async def sigint_ignored() -> bool:
            return any(["received SIGINT, ignoring it" in ln async for ln in ray_client.read_log(job.id)])

        await until(None, sigint_ignored, "the trainer ignoring the stop's SIGINT", timeout=30, interval=0.5)
        assert (await ctl.refresh()).status == "RUNNING" and ctl.state is RunPhase.STOPPING
        t0 = time.monotonic()
        summary = await ctl.force_stop()
        assert summary.startswith("SIGKILLed the driver (pid"), summary
        final = await ctl.wait_terminal(30)
        assert final.status == "STOPPED" and time.monotonic() - t0 < 60  # far less than the 120 s grace
    finally:
        await stop_quietly(ray_client, job.id)
    entries = AuditLog(tmp_path / "state").entries()
    # a launch is two entries: its intent (written before the submit) and its outcome
    assert [e.action for e in entries] == ["launch", "launch", "abort", "force-stop"]
    assert entries[0].result.startswith("submitting") and entries[1].result == "submitted"
    assert entries[0].job == entries[1].job == job.id


async def test_console_killed_midrun_then_status_and_logs_rebuild(ray_cluster, tmp_path: Path) -> None:
    addr, state = ray_cluster.address, tmp_path / "state"
    launched = cli(addr, state, "launch", *spec_args(tmp_path, stop_wait_s=10), "--yes", "--json")
    assert launched.returncode == 0, launched.stderr
    job_id = json.loads(launched.stdout.strip().splitlines()[-1])["job"]
    try:
        follower = subprocess.Popen(
            [sys.executable, "-m", "console.cli", "--address", addr, "logs", "--follow"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(state),
            stdin=subprocess.DEVNULL,
        )
        seen: list[str] = []
        stdout = follower.stdout
        assert stdout is not None

        def two_metric_lines() -> bool:  # one line per look: the follower's output, read as it comes
            line = stdout.readline()
            assert line, follower.stderr.read() if follower.stderr else "follower ended"
            seen.append(line.rstrip("\n"))
            return sum(bool(METRIC_LINE.search(x)) for x in seen) >= 2

        await until(None, two_metric_lines, "two metric lines from `logs --follow`", timeout=90, interval=0)
        os.kill(follower.pid, signal.SIGKILL)  # the console dies mid-run
        follower.wait(10)
        assert sum(bool(METRIC_LINE.search(x)) for x in seen) >= 2
        assert not any("\x1b" in x for x in seen)  # Ray's coloured prefixes were sanitised

        status = cli(addr, state, "status", "--json")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["job"] == job_id and info["status"] == "RUNNING" and info["kind"] == "ours"

        history = cli(addr, state, "logs")
        assert history.returncode == 0, history.stderr
        lines = history.stdout.splitlines()
        assert any(f"Running entrypoint for job {job_id}" in x for x in lines)
        assert any("SIMULATED TRAINER" in x for x in lines)
        assert lines[: len(seen) - 1] == seen[: len(seen) - 1]  # the whole history, in order, from line 0
        assert "\x1b" not in history.stdout

        second = cli(addr, state, "launch", *spec_args(tmp_path), "--yes")
        assert second.returncode == 2
        assert second.stderr.startswith(f"ultra-console: error: launch refused: [P3] ours run {job_id}")

        one = one_line_error(cli(addr, state, "--readonly", "abort", "--yes"))
        assert "read-only" in one
        one = one_line_error(cli(addr, state, "abort"))
        assert "pass --yes" in one
        abort = cli(addr, state, "abort", "--yes")
        assert abort.returncode == 0, abort.stderr
        assert f"job {job_id} ended STOPPED" in abort.stdout
        assert json.loads(cli(addr, state, "status", "--json").stdout)["status"] == "STOPPED"
    finally:
        async with RayClient(addr) as client:
            await stop_quietly(client, job_id)


async def test_attach_to_a_run_submitted_by_miles_launcher(
    ray_cluster, ray_client: RayClient, tmp_path: Path
) -> None:
    # What miles' launcher sends: `ray job submit --runtime-env-json=... -- python3 <repo>/train.py <args>`,
    # no submission id, no metadata, no stop settings (Ray's SIGTERM and 3 s apply).
    sub = build_submission(sim_spec(tmp_path), run_id="261130-080000-000", nvlink=False, with_shim=False)
    env = {k: v for k, v in sub.runtime_env["env_vars"].items() if not k.startswith("RAY_JOB_STOP")}
    sid = await ray_client.submit({"entrypoint": sub.entrypoint, "runtime_env": {"env_vars": env}})
    try:
        assert sid.startswith("raysubmit_")
        state = tmp_path / "state"

        async def started() -> bool:
            return (await ray_client.get_job(sid)).status == "RUNNING"

        await until(None, started, "the miles job to run", 60, interval=0.5)
        info = json.loads(cli(ray_cluster.address, state, "status", "--json").stdout)
        assert (info["job"], info["kind"], info["status"]) == (sid, "miles", "RUNNING")
        assert info["stop"] == {"signal": "SIGTERM", "grace_s": 3}
        abort = cli(ray_cluster.address, state, "abort", "--yes")
        assert (
            abort.returncode == 0 and "SIGTERM" in abort.stdout and f"job {sid} ended STOPPED" in abort.stdout
        )
    finally:
        await stop_quietly(ray_client, sid)


async def test_dashboard_unreachable_then_recovers(ray_cluster, tmp_path: Path) -> None:
    port = int(ray_cluster.address.rsplit(":", 1)[1])
    proxy = await PausableProxy(port).start()
    state = tmp_path / "state"
    try:
        async with RayClient(proxy.address, timeout=5.0, retries=1) as client:
            sid = await client.submit(
                {"entrypoint": "echo short run", "metadata": {"ultra_console": "1", "run_id": "proxy-test"}}
            )
            ctl = RunController(client, state_dir=state, poll_s=0.3)
            await ctl.attach(sid)
            events: list[RunEvent] = []
            ctl.subscribe(events.append)
            poller = TelemetryPoller(client, interval_s=0.5)
            polled: list[object] = []

            async def poll() -> None:
                async for item in poller.run():
                    polled.append(item)

            watcher = asyncio.create_task(ctl.watch(until_terminal=False))
            poll_task = asyncio.create_task(poll())
            await until(
                None, lambda: polled and not isinstance(polled[-1], Exception), "a first good poll", 20
            )
            await proxy.pause()

            async def lost() -> bool:
                return any(e.kind == "error" for e in events)

            await until(None, lost, "the lost-dashboard event", 20, interval=0.2)
            err = next(e for e in events if e.kind == "error")
            assert f"unreachable at {proxy.address}" in err.text
            cli_proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "console.cli",
                "--address",
                proxy.address,
                "status",
                cwd=REPO,
                env=cli_env(state),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            _, errb = await asyncio.wait_for(cli_proc.communicate(), 60)
            assert cli_proc.returncode == 1
            lines = errb.decode().strip().splitlines()
            assert (
                len(lines) == 1
                and "Ray dashboard unreachable at" in lines[0]
                and "Traceback" not in errb.decode()
            )
            # the poller reports the loss too (its next request, once its 2.5 s request spacing has passed)
            await until(
                None, lambda: any(isinstance(p, Exception) for p in polled), "the poller's lost reading", 20
            )
            n_before = len(polled)

            await proxy.resume()

            async def back() -> bool:
                return any(e.kind == "recovered" for e in events)

            await until(None, back, "the dashboard-back event", 20, interval=0.2)
            await until(
                None,
                lambda: len(polled) > n_before and not isinstance(polled[-1], Exception),
                "a good poll",
                20,
            )
            assert not isinstance(polled[-1], Exception)  # the poller recovered by itself
            watcher.cancel()
            poller.stop()
            await asyncio.gather(watcher, poll_task, return_exceptions=True)
    finally:
        await proxy.close()


async def test_raylet_killed_node_dead_and_failure_reason(
    ray_cluster, ray_client: RayClient, tmp_path: Path
) -> None:
    idx = ray_cluster.add_node()
    dead_id = ray_cluster.node_ids[idx]
    ctl, job = await start_run(ray_client, tmp_path, nodes=4)
    try:
        await metric_lines(ray_client, job.id, want=1)
        ray_cluster.kill_node(idx)
        final = await ctl.wait_terminal(90)
        assert final.status == "FAILED"
        status = cli(ray_cluster.address, tmp_path / "state", "status", "--job", job.id, "--json")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["status"] == "FAILED" and info["failure_reason"]
        assert "exit code" in info["failure_reason"] and "Error" in info["failure_reason"]
        cause = info["cause"]  # §3b: the node is the root, never the actor deaths Ray reports after it
        assert cause["id"] == "node-dead" and dead_id in cause["message"], cause
        assert "node-dead" not in {c["id"] for c in cause["consequences"]}, cause
        (dead,) = [n for n in info["nodes"]["dead"] if n["node_id"] == dead_id]
        assert "termination" in dead["reason"] or "heartbeat" in dead["reason"]
        text = cli(ray_cluster.address, tmp_path / "state", "status", "--job", job.id)
        # the dead node by its one name (backend/node_names.py); Ray may list a dead node by its hostname
        assert "reason   " in text.stdout and "  dead   " in text.stdout and "heartbeat" in text.stdout
        nodes = json.loads(cli(ray_cluster.address, tmp_path / "state", "nodes", "--json").stdout)
        assert any(n["node_id"] == dead_id and not n["alive"] for n in nodes["nodes"])
    finally:
        await stop_quietly(ray_client, job.id)


async def test_abort_while_pending_says_so_and_keeps_watching(
    ray_cluster, ray_client: RayClient, tmp_path: Path
) -> None:
    # Last in the module: it adds a 16-GPU node to unblock the job, and kills it afterwards. Ray's stop does
    # not cancel a PENDING job (one still waiting for resources): the controller
    # must say so, stay PENDING, and see what happens next.
    sid = await ray_client.submit(
        {
            "entrypoint": "sleep 600",
            "entrypoint_num_gpus": 16,
            "metadata": {"ultra_console": "1", "run_id": "pending-test"},
        }
    )
    ctl = RunController(ray_client, state_dir=tmp_path / "state", poll_s=0.5)
    events: list[RunEvent] = []
    ctl.subscribe(events.append)
    try:
        await ctl.attach(sid)
        assert ctl.state is RunPhase.PENDING
        outcome = await ctl.abort()
        assert outcome.message.startswith(
            "the job is still PENDING: Ray's stop does not cancel a pending job"
        )
        assert any(e.kind == "notice" and "still watching" in e.text for e in events)
        forced = await ctl.force_stop()
        assert "no way to remove a PENDING job" in forced

        async def still_pending() -> bool:
            return (await ctl.refresh()).status == "PENDING" and ctl.state is RunPhase.PENDING

        await holds(None, still_pending, "the job stays PENDING after the stop and the force-stop", 3.0)
        big = ray_cluster.add_node(gpus=16)
        try:
            final = await ctl.wait_terminal(90)
            assert final.status in ("STOPPED", "FAILED")  # the queued stop applied once it started
        finally:
            ray_cluster.kill_node(big)  # later modules expect alive nodes of 8 GPUs (dead ones are fine)
    finally:
        await stop_quietly(ray_client, sid)
