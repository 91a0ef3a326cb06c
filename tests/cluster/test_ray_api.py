"""backend.cluster.dashboard against a real loopback Ray cluster (plus a few pure unit checks)."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
import uuid

import pytest
from dashboard_raw import raw_data
from runhelp import job_reaches
from waiting import until

from backend.cluster.dashboard import (
    AuthFailed,
    AuthRequired,
    DashboardUnreachable,
    DuplicateSubmission,
    JobNotFound,
    RayApiError,
    RayClient,
    _LineSplitter,
    ray_error_sentence,
)
from backend.demo.simtrainer import SIM_LABEL, SIM_TRAIN_SCRIPT


def _sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _py(code: str) -> str:
    return shlex.join(["python3", "-c", code])


def _sim_payload(sid: str, *extra: str, env: dict[str, str] | None = None) -> dict:
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--actor-num-gpus-per-node",
        "8",
        "--sim-step-seconds",
        "0.3",
        "--colocate",
        "--some-unknown-miles-flag",
        "7",
        *extra,
    ]
    return {
        "entrypoint": shlex.join(argv),
        "submission_id": sid,
        "metadata": {"simulated": "1"},
        "runtime_env": {"env_vars": env or {}},
    }


# ------------------------------------------------------------------ unit (no cluster)
def test_ray_error_sentence_keeps_the_reason_only():
    body = (
        'Traceback (most recent call last):\n  File "/x/job_manager.py", line 1, in submit\n'
        "    raise ValueError(msg)\nValueError: Job with submission_id a already exists. "
        "Please use a different submission_id.\n"
    )
    assert ray_error_sentence(body) == (
        "Job with submission_id a already exists. Please use a different submission_id."
    )
    assert ray_error_sentence("") == "no reason given"
    assert "\n" not in ray_error_sentence("a\nb\nRuntimeError: it broke\n")
    assert ray_error_sentence("Traceback:\nRuntimeError: Attempted to delete job 'x'.\n.\n") == (
        "Attempted to delete job 'x'."
    )


def test_line_splitter_matches_text_mode_newlines_across_chunks():
    sp = _LineSplitter()
    out = sp.feed("a\r") + sp.feed("\nb\rc\nunterminated")
    assert out == ["a", "b", "c"]
    assert sp.flush() == ["unterminated"]
    assert sp.feed("x\n\ny\n") == ["x", "", "y"]


async def test_unreachable_dashboard_fails_fast_with_address():
    sys.path.insert(0, "tests")
    from raycluster import free_port

    address = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    async with RayClient(address, retries=3, backoff_s=0.05) as client:
        with pytest.raises(DashboardUnreachable) as err:
            await client.get_job("anything")
        assert client.requests_made == 3  # bounded retries, then one clear error
    assert time.monotonic() - t0 < 3.0
    assert str(err.value).startswith(f"Ray dashboard unreachable at {address}")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ real cluster
@pytest.mark.ray
async def test_version_nodes_and_fake_gpus(ray_cluster, ray_client):
    assert (await ray_client.version())["ray_version"] == "2.60.0"
    nodes = await ray_client.nodes()
    alive = {n["node_id"] for n in nodes if n["state"] == "ALIVE"}
    assert set(ray_cluster.node_ids[:3]) <= alive
    gpus: dict[str, list] = {}

    async def eight_each() -> bool:  # the agent's first report with GPUs can take a few seconds
        summary = await ray_client.nodes_summary()
        gpus.clear()
        gpus.update({s["raylet"]["nodeId"]: s.get("gpus", []) for s in summary["summary"]})
        return all(len(gpus.get(n, [])) == 8 for n in ray_cluster.node_ids[:3])

    await until(
        None,
        eight_each,
        lambda: f"8 fake GPUs per node (have { {k: len(v) for k, v in gpus.items()} })",
        30,
        interval=1.0,
    )
    first = gpus[ray_cluster.node_ids[0]][0]
    assert first["name"] == "NVIDIA H200 (fake)" and first["memoryTotal"] == 143771
    detail = await raw_data(ray_client, f"/nodes/{ray_cluster.node_ids[1]}", "detail")
    assert detail["raylet"]["nodeId"] == ray_cluster.node_ids[1]
    status = await raw_data(ray_client, "/api/cluster_status", "clusterStatus")
    assert status["loadMetricsReport"]["usageByNode"]


@pytest.mark.ray
async def test_unknown_job_is_job_not_found(ray_client):
    for call in (ray_client.get_job, ray_client.stop_job, ray_client.delete_job):
        with pytest.raises(JobNotFound, match="no job 'no-such-job'"):
            await call("no-such-job")
    with pytest.raises(JobNotFound):
        [line async for line in ray_client.read_log("no-such-job")]
    with pytest.raises(RayApiError):
        [line async for line in ray_client.follow_log("no-such-job")]


@pytest.mark.ray
async def test_duplicate_submission_and_delete(ray_client):
    sid = _sid("dup")
    payload = {"entrypoint": _py("print('hello from a plain job')"), "submission_id": sid}
    assert await ray_client.submit(payload) == sid
    with pytest.raises(DuplicateSubmission, match="already exists") as err:
        await ray_client.submit(payload)
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)
    job = await job_reaches(ray_client, sid, {"SUCCEEDED", "FAILED"})
    assert job.status == "SUCCEEDED" and job.is_terminal and job.driver_exit_code == 0
    assert sid in {j.id for j in await ray_client.list_jobs()}
    lines = [line async for line in ray_client.read_log(sid)]
    assert "hello from a plain job" in lines
    assert await ray_client.delete_job(sid) is True
    with pytest.raises(JobNotFound):
        await ray_client.get_job(sid)


@pytest.mark.ray
async def test_delete_running_job_is_refused_in_one_sentence(ray_client):
    sid = _sid("delrun")
    await ray_client.submit({"entrypoint": _py("import time; time.sleep(60)"), "submission_id": sid})
    await job_reaches(ray_client, sid, {"RUNNING"})
    with pytest.raises(RayApiError, match="non-terminal state") as err:
        await ray_client.delete_job(sid)
    assert "\n" not in str(err.value)
    assert await ray_client.stop_job(sid) is True
    await job_reaches(ray_client, sid, {"STOPPED"})
    assert await ray_client.stop_job(sid) is False  # already terminal


@pytest.mark.ray
async def test_sim_launch_follow_metrics_then_sigint_stop(ray_client):
    """RUNNING -> metric lines in the followed log -> stop (SIGINT) -> STOPPED, follow ends."""
    sid = _sid("sim-stop")
    await ray_client.submit(
        _sim_payload(
            # SIGINT's grace before Ray's SIGKILL is a bound (the driver exits in ~3 s); 10 s was too short
            # on a loaded CI runner: the driver was killed before its "shutting down cleanly" line
            sid,
            "--sim-forever",
            env={"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": "45"},
        )
    )
    await job_reaches(ray_client, sid, {"RUNNING"})
    seen: list[str] = []
    stop_sent = False
    t0 = time.monotonic()

    async def follow() -> None:
        nonlocal stop_sent
        async for line in ray_client.follow_log(sid):
            seen.append(line)
            if not stop_sent and "model.py:854 - step 1:" in line:
                stop_sent = True
                assert await ray_client.stop_job(sid) is True

    await asyncio.wait_for(follow(), timeout=120)  # the follow ends by itself once STOPPED and drained
    job = await ray_client.get_job(sid)
    assert job.status == "STOPPED", job.message
    text = "\n".join(seen)
    assert any(SIM_LABEL in s for s in seen[:4])  # the trainer's first line says it is simulated
    assert "(MegatronTrainRayActorWithConcurrencyGroups pid=" in text and "(RolloutExecutor pid=" in text
    assert "log_utils.py:542 - step 0: {" in text and "metrics.py:89 - perf 0: {" in text
    driver = [s for s in seen if "pid=" not in s[:80]]  # the driver's own lines: where the signal met it
    assert "KeyboardInterrupt (SIGINT), shutting down cleanly" in text, "\n".join(driver[-12:])
    assert "finish_tracking: done" in text
    history = [line async for line in ray_client.read_log(sid)]
    assert history == seen  # the followed log and the rebuilt history agree line for line
    assert time.monotonic() - t0 < 120


@pytest.mark.ray
async def test_trainer_ignoring_sigterm_still_ends_stopped(ray_client):
    sid = _sid("sim-term")
    await ray_client.submit(
        _sim_payload(sid, "--sim-forever", "--sim-ignore-sigterm", env={"RAY_JOB_STOP_WAIT_TIME_S": "2"})
    )
    await job_reaches(ray_client, sid, {"RUNNING"})
    async for line in ray_client.follow_log(sid):
        if "Placement group ready" in line:
            break
    t0 = time.monotonic()
    assert await ray_client.stop_job(sid) is True
    job = await job_reaches(ray_client, sid, {"STOPPED", "FAILED", "SUCCEEDED"}, timeout=60)
    assert job.status == "STOPPED"
    assert time.monotonic() - t0 < 30
    tail = [line async for line in ray_client.read_log(sid, tail=50)]
    assert any("received SIGTERM, ignoring it" in line for line in tail), "\n".join(tail)
    assert not any("finish_tracking: done" in line for line in tail)  # SIGKILLed, no clean exit


@pytest.mark.ray
async def test_read_log_tail_returns_the_last_lines(ray_client):
    sid = _sid("tail")
    await ray_client.submit(
        {"entrypoint": _py("for i in range(300): print(f'row {i}')"), "submission_id": sid}
    )
    await job_reaches(ray_client, sid, {"SUCCEEDED"})
    whole = [line async for line in ray_client.read_log(sid)]
    last = [line async for line in ray_client.read_log(sid, tail=7)]
    assert last == whole[-7:] and "row 299" in whole
    assert [line async for line in ray_client.read_log(sid, tail=0)] == []


class CuttableProxy:
    """A loopback TCP proxy to the dashboard whose live connections the test can cut (reset)
    or freeze (silently drop their bytes while the sockets stay open)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0
        self.frozen_below = 0  # connections numbered below this forward nothing
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if number >= self.frozen_below:
                        dst.write(data)
                        await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def freeze(self) -> None:
        self.frozen_below = self.connections + 1

    def cut(self) -> None:
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        if self.server:
            self.server.close()


@pytest.mark.ray
async def test_follow_log_survives_dropped_connections_without_loss_or_repeat(ray_cluster, ray_client):
    sid = _sid("cut")
    n = 400
    await ray_client.submit(
        {
            "entrypoint": _py(
                f"import time\nfor i in range({n}):\n    print(f'counter "
                "{i:05d}', flush=True)\n    time.sleep(0.015)"
            ),
            "submission_id": sid,
        }
    )
    port = int(ray_cluster.address.rsplit(":", 1)[1])
    proxy = CuttableProxy(port)
    proxy_port = await proxy.start()
    got: list[str] = []
    cuts = 0
    try:
        async with RayClient(f"http://127.0.0.1:{proxy_port}", timeout=30.0) as via_proxy:

            async def follow() -> None:
                nonlocal cuts
                async for line in via_proxy.follow_log(sid, reconnect_delay_s=0.2):
                    got.append(line)
                    counters = sum(1 for g in got if g.startswith("counter "))
                    if (cuts == 0 and counters >= 60) or (cuts == 1 and counters >= 200):
                        cuts += 1
                        proxy.cut()

            await asyncio.wait_for(follow(), timeout=120)
            requests = via_proxy.requests_made
    finally:
        await proxy.close()
    assert cuts == 2 and proxy.connections >= 3  # it really reconnected
    counters = [g for g in got if g.startswith("counter ")]
    assert counters == [f"counter {i:05d}" for i in range(n)]
    assert got == [line async for line in ray_client.read_log(sid)]
    assert requests <= 12, requests


@pytest.mark.ray
async def test_dashboard_outage_is_one_clear_error_then_recovers(ray_cluster):
    """The dashboard goes away (its port stops answering) and comes back on the same address."""
    proxy = CuttableProxy(int(ray_cluster.address.rsplit(":", 1)[1]))
    port = await proxy.start()
    address = f"http://127.0.0.1:{port}"
    async with RayClient(address, timeout=5.0, retries=2, backoff_s=0.05) as client:
        assert (await client.version())["ray_version"] == "2.60.0"
        await proxy.close()
        with pytest.raises(DashboardUnreachable, match=f"^Ray dashboard unreachable at {address}: "):
            await client.list_jobs()
        proxy.server = await asyncio.start_server(proxy._handle, "127.0.0.1", port)
        try:
            assert isinstance(await client.list_jobs(), list)  # same client, no restart needed
        finally:
            await proxy.close()


@pytest.mark.ray
async def test_follow_log_replaces_a_silently_dead_connection(ray_cluster, ray_client):
    """A connection that stays open but carries nothing (no RST, no FIN) is found by the idle
    check (the log moved on without us) and replaced, again without loss or repeat."""
    sid = _sid("freeze")
    await ray_client.submit(
        {
            "entrypoint": _py(
                "import time\nfor i in range(60):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.1)\n"
                "time.sleep(4)\nprint('after the pause', flush=True)"
            ),
            "submission_id": sid,
        }
    )
    proxy = CuttableProxy(int(ray_cluster.address.rsplit(":", 1)[1]))
    proxy_port = await proxy.start()
    got: list[str] = []
    try:
        async with RayClient(f"http://127.0.0.1:{proxy_port}", timeout=3.0) as via_proxy:
            async for line in via_proxy.follow_log(sid, reconnect_delay_s=0.2, idle_check_s=1.5):
                got.append(line)
                if line == "tick 10":
                    proxy.freeze()
    finally:
        await proxy.close()
    assert proxy.connections >= 3  # the frozen one, the idle checks' requests, the replacement
    assert [g for g in got if g.startswith("tick ")] == [f"tick {i}" for i in range(60)]
    assert got == [line async for line in ray_client.read_log(sid)]
    assert got[-1] == "after the pause"


@pytest.mark.ray
async def test_follow_from_offset_resumes_after_history(ray_client):
    """What a restarted console does: rebuild history, then follow from where it ended."""
    sid = _sid("resume")
    await ray_client.submit(
        {
            "entrypoint": _py(
                "import time\nfor i in range(40):\n    print(f'item {i}', flush=True)\n    time.sleep(0.05)"
            ),
            "submission_id": sid,
        }
    )
    await job_reaches(ray_client, sid, {"RUNNING", "SUCCEEDED"})

    async def some_items() -> bool:  # the history to rebuild is part of the run, not nothing
        return any([line.startswith("item ") async for line in ray_client.read_log(sid)])

    await until(None, some_items, "the job's first lines", 30, interval=0.2)
    history = [line async for line in ray_client.read_log(sid)]
    rest = [line async for line in ray_client.follow_log(sid, start_offset=len(history))]
    whole = [line async for line in ray_client.read_log(sid)]
    assert history + rest == whole
    assert [w for w in whole if w.startswith("item ")] == [f"item {i}" for i in range(40)]


@pytest.mark.ray
async def test_token_auth(ray_auth_cluster):
    address, token = ray_auth_cluster.address, ray_auth_cluster.token
    async with RayClient(address) as anon:
        with pytest.raises(AuthRequired, match="requires a token"):
            await anon.version()
    async with RayClient(address, "wrong-token") as wrong:
        with pytest.raises(AuthFailed):
            await wrong.list_jobs()
    async with RayClient(address, token) as ok:
        assert (await ok.version())["ray_version"] == "2.60.0"
        sid = _sid("authed")
        await ok.submit({"entrypoint": _py("print('authed job ran')"), "submission_id": sid})
        followed = [line async for line in ok.follow_log(sid)]  # websocket carries the token too
        assert "authed job ran" in followed
        assert (await ok.get_job(sid)).status == "SUCCEEDED"
    assert token and token not in repr(sys.argv)
