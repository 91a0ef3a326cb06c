"""Leftovers on the real loopback Ray cluster: read on the node after the job ended, never from the summary.

The jobs here are the smallest honest runs: a driver and its child, each "holding" a fake GPU (a holding
file the fake NVML reads, backend/demo/simtrainer/fakegpu), pinned to one worker node. A graceful stop
ends both; one variant also double-forks an orphan that escapes the driver's process tree (what an SGLang
scheduler does once its engine actor dies).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from runhelp import cli, sim_spec
from waiting import until

from backend.cluster.controller import RunController
from backend.cluster.dashboard import RayClient
from backend.cluster.leftovers import JobFootprint, Leftover, kill_leftovers, read_leftovers
from backend.cluster.preflight import preflight
from backend.cluster.telemetry import snapshot

pytestmark = [pytest.mark.ray, pytest.mark.asyncio(loop_scope="session")]

HOLDER = textwrap.dedent("""\
    import json, os, subprocess, sys, time
    node, orphan = sys.argv[1], sys.argv[2] == "orphan"
    base = os.path.join(os.environ["FAKE_GPU_DIR"], node)
    os.makedirs(base, exist_ok=True)
    def hold(gpu, pid, mem):
        with open(os.path.join(base, f"gpu{gpu}-{pid}.json"), "w") as fh:
            json.dump({"mem": mem, "util": 60}, fh)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    hold(4, os.getpid(), 12806)
    hold(5, child.pid, 9000)
    if orphan and os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            hold(6, os.getpid(), 12806)
            print("ORPHAN", os.getpid(), flush=True)
            time.sleep(600)
        os._exit(0)
    print("HOLDING", os.getpid(), child.pid, flush=True)
    time.sleep(600)
""")


async def submit_holder(client: RayClient, node_id: str, tag: str, *, orphan: bool = False) -> str:
    sid = f"leftover-test-{tag}-{int(time.time() * 1000)}"
    await client.submit(
        {
            "entrypoint": shlex.join(
                [sys.executable, "-c", HOLDER, node_id, "orphan" if orphan else "plain"]
            ),
            "submission_id": sid,
            "entrypoint_label_selector": {"ray.io/node-id": node_id},
            "entrypoint_num_cpus": 0.01,
        }
    )
    return sid


async def log_pids(client: RayClient, sid: str, word: str, timeout: float = 60) -> list[int]:
    async def found() -> list[int] | None:
        async for line in client.read_log(sid):
            if line.startswith(word + " "):
                return [int(x) for x in line.split()[1:]]
        return None

    return await until(None, found, f"{word} in the log of {sid}", timeout, interval=0.5)


async def summary_pids(client: RayClient, node_id: str) -> set[int]:
    snap = await snapshot(client, include_dead=False)
    return {p.pid for _, p in snap.gpu_holders().get(node_id, [])}


@pytest.mark.timeout(480)
async def test_ten_graceful_aborts_end_with_no_leftover_while_the_summary_lists_dead_pids(
    ray_client: RayClient, ray_cluster, tmp_path: Path
) -> None:
    node_id = ray_cluster.node_ids[1]
    listed_dead = 0
    for i in range(10):
        sid = await submit_holder(ray_client, node_id, f"g{i}")
        pids = set(await log_pids(ray_client, sid, "HOLDING"))

        async def in_summary(pids: set[int] = pids) -> bool:
            return pids <= await summary_pids(ray_client, node_id)

        await until(None, in_summary, "the job's PIDs in the dashboard summary", 30, interval=0.5)
        ctl = RunController(ray_client, state_dir=tmp_path / "state", poll_s=0.3)
        await ctl.attach(sid)
        await ctl.abort()
        job = await ctl.wait_terminal(30)
        assert job.status == "STOPPED"
        assert not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
        )
        stale = pids & await summary_pids(ray_client, node_id)  # what a dashboard-based check would report
        report = await ctl.leftovers()
        listed_dead += bool(stale)
        assert report.clean, report.lines()
        assert [n.node_id for n in report.nodes] == [node_id]  # the node that ran it, read there
        assert report.summary().startswith("no leftover GPU processes (1 of 1 node(s) answered")
    sys.stderr.write(f"\n[leftovers] the summary still listed dead PIDs in {listed_dead} of 10 checks\n")
    assert listed_dead >= 1


@pytest.mark.timeout(240)
async def test_double_forked_orphan_is_listed_and_killed(
    ray_client: RayClient, ray_cluster, tmp_path: Path
) -> None:
    node_id = ray_cluster.node_ids[2]
    sid = await submit_holder(ray_client, node_id, "orphan", orphan=True)
    (orphan,) = await log_pids(ray_client, sid, "ORPHAN")
    bystander = psutil.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        ctl = RunController(ray_client, state_dir=tmp_path / "state", poll_s=0.3)
        await ctl.attach(sid)
        with pytest.raises(Exception, match="after the job ended"):
            await ctl.leftovers()  # while it runs, its processes hold GPU memory legitimately
        await ctl.abort()
        assert (await ctl.wait_terminal(30)).status == "STOPPED"
        assert psutil.pid_exists(orphan)  # it escaped the driver's process tree: Ray's stop missed it
        report = await ctl.leftovers()
        assert [(i.pid, i.gpu_index, i.mem_mb) for i in report.killable] == [(orphan, 6, 12806)], (
            report.lines()
        )
        assert not report.unidentified and "submission id" in report.killable[0].reason

        async def p2() -> bool:  # the launch check warns about the GPU in use meanwhile
            return any(
                f.rule == "P2" and f"pid {orphan}" in f.message
                for f in await preflight(sim_spec(tmp_path), ray_client)
            )

        await until(None, p2, "preflight P2 naming the orphan", 30, interval=0.5)

        # a PID that holds no GPU memory, as a stale list might offer it, is left alone by the kill job
        stale = Leftover(node_id, report.killable[0].node_label, 0, bystander.pid, 100)
        results = {r.pid: r for r in await ctl.cleanup([*report.killable, stale])}
        assert results[orphan].action == "killed" and results[orphan].signal == "SIGTERM"
        assert results[bystander.pid].action == "skipped"
        assert results[bystander.pid].reason == "no longer holds GPU memory"
        assert bystander.is_running()
        await asyncio.sleep(0)
        assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
        again = cli(ray_cluster.address, tmp_path / "state", "cleanup", "--yes", "--job", sid)
        assert again.returncode == 0 and "no leftover GPU processes" in again.stdout, (
            again.stdout + again.stderr
        )
        assert "checking 1 node(s)" in again.stdout  # the footprint the abort recorded: the node that ran it
    finally:
        bystander.kill()
        bystander.wait(10)
        if psutil.pid_exists(orphan):
            psutil.Process(orphan).kill()


async def test_kill_job_refuses_a_gpu_holder_without_the_jobs_id(
    ray_client: RayClient, ray_cluster, tmp_path: Path
) -> None:
    """A process of no job, holding a GPU, is offered to the
    kill job directly: it is checked there and spared."""
    node_id = ray_cluster.node_ids[2]
    stray = psutil.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    hold = ray_cluster.fake_gpu_dir / node_id / f"gpu7-{stray.pid}.json"
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.write_text('{"mem": 5000, "util": 40}')
    try:
        item = Leftover(node_id, node_id[:8], 7, stray.pid, 5000)
        (result,) = await kill_leftovers(
            ray_client, JobFootprint("some-other-job", "0f000000"), [item], grace_s=1.0, timeout_s=60
        )
        assert result.action == "skipped"
        assert result.reason.startswith("held by a process this node cannot identify as the job's")
        assert stray.is_running()
    finally:
        hold.unlink()
        stray.kill()
        stray.wait(10)


async def test_a_node_that_does_not_answer_in_time_is_named_not_assumed_clean(
    ray_client: RayClient, ray_cluster
) -> None:
    nodes = [(n, f"node-{i}") for i, n in enumerate(ray_cluster.node_ids[:2])]
    report = await read_leftovers(ray_client, JobFootprint("some-job"), nodes, timeout_s=0.01)
    assert not report.clean and len(report.silent) == 2
    assert all(n.problem.startswith("no answer in 0 s") for n in report.silent)
    assert any(
        line.startswith("node node-1 did not answer: no answer in 0 s (its list job was still ")
        and line.endswith("; stopped)")
        for line in report.lines()
    ), report.lines()

    async def stopped() -> bool:  # the reaper jobs that did not answer in time were stopped, not left running
        jobs = [j for j in await ray_client.list_jobs() if (j.metadata or {}).get("ultra_console_cleanup")]
        return all(j.is_terminal for j in jobs)

    await until(None, stopped, "the unanswered reaper jobs to be stopped", 30, interval=0.5)
