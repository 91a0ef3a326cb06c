"""The console's GPU probe on the real Ray test cluster (fake NVML inside each node,
backend/demo/simtrainer/fakegpu): one probe for two consoles, its readings in the pane's snapshots first,
nothing reserved, a launch still allowed, gone after its last console's SIGKILL, none started by
a read-only console, a node that joins later sampled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest
from dashboard_raw import raw_data
from raycluster import REPO, LocalRayCluster
from waiting import until

from backend.cluster.dashboard import RayClient
from backend.cluster.gpu_probe import GpuProbe, is_probe
from backend.cluster.job_identity import latest_run
from backend.cluster.preflight import preflight
from backend.cluster.telemetry import TelemetryPoller
from backend.plan.spec import build_spec

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
SHORT_LEASE_S = (
    6.0  # the tests' lease timeout (the real default, <= 60 s, is asserted in tests/unit/test_gpu_probe)
)


async def _probes(client: RayClient) -> list[str]:
    """The probes running: their hub actors alive (the job that starts one ends within seconds)."""
    payload = await client.get_json("/api/v0/actors", {"limit": 1000, "detail": 1})
    rows = payload["data"]["result"]["result"]  # type: ignore[index]
    return [
        a["name"] for a in rows if str(a.get("name") or "").startswith("gpu-probe-") and a["state"] == "ALIVE"
    ]


async def _probe_jobs_running(client: RayClient) -> list[str]:
    return [j.id for j in await client.list_jobs() if is_probe(j) and not j.is_terminal]


async def _no_probe_left(client: RayClient) -> None:
    await until(None, lambda: _none(client), "no GPU probe running", timeout=60, interval=0.5)


async def _none(client: RayClient) -> bool:
    return not await _probes(client)


@contextlib.asynccontextmanager
async def _consoles(client: RayClient, *readonly: bool) -> AsyncIterator[list[GpuProbe]]:
    probes = [
        GpuProbe(client, readonly=ro, lease_timeout_s=SHORT_LEASE_S, lease_renew_s=1.0) for ro in readonly
    ]
    tasks = [asyncio.create_task(p.run()) for p in probes]
    try:
        yield probes
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)  # quitting never hangs


def _alive(probe: GpuProbe, rc: LocalRayCluster, ids: list[str] | None = None) -> bool:
    fresh = probe.fresh(time.time())
    return all(n in fresh for n in (ids or [n for i, n in enumerate(rc.node_ids) if i not in rc.dead]))


async def test_two_consoles_share_one_probe_that_feeds_the_pane_and_reserves_nothing(
    ray_cluster: LocalRayCluster, ray_client: RayClient
) -> None:
    await _no_probe_left(ray_client)
    head = ray_cluster.node_ids[0]
    override = ray_cluster.fake_gpu_dir / head / "override.json"
    holder = ray_cluster.fake_gpu_dir / head / f"gpu2-{os.getpid()}.json"  # this process "holds" GPU 2
    override.parent.mkdir(parents=True, exist_ok=True)
    holder.write_text(json.dumps({"mem": 40000, "util": 10}))
    try:
        async with _consoles(ray_client, False, False) as (one, two):
            await until(
                None,
                lambda: _alive(one, ray_cluster) and _alive(two, ray_cluster),
                "both consoles reading every node from the probe",
                timeout=90,
                interval=0.3,
            )
            assert len(one.started + two.started) == 1 and len(await _probes(ray_client)) == 1
            (sid,) = one.started + two.started
            assert sid.startswith("ultra-console-gpu-probe-") and (await ray_client.get_job(sid)).is_terminal
            assert await _probe_jobs_running(ray_client) == []  # no JobSupervisor kept beside it
            assert one.lease_seen and two.lease_seen
            # the pane's snapshots: the probe's reading, within seconds of NVML changing
            poller = TelemetryPoller(ray_client, interval_s=1.0)
            poller.use_probe(two)
            override.write_text(json.dumps({"3": {"util": 77}}))

            async def shows_77() -> bool:
                snap = await poller.poll_once()
                node = snap.node(head)
                return bool(node and node.gpus and node.gpus[3].utilization_pct == 77.0)

            await until(
                None, shows_77, "the head's GPU 3 at 77 % through the probe", timeout=10, interval=0.2
            )
            snap = await poller.poll_once()
            node = snap.node(head)
            assert node is not None and node.gpu_source == "probe" and "GPU probe" in snap.sources
            assert node.gpus is not None and [p.pid for p in node.gpus[2].processes] == [os.getpid()]
            assert node.gpus[0].power_w is not None and node.gpus[0].temp_c is not None
            # it reserves nothing a run could need, and is never taken for a run: a launch is still allowed
            status = await raw_data(ray_client, "/api/cluster_status", "clusterStatus")
            report = status["loadMetricsReport"]
            assert isinstance(report, dict), status
            usage = report["usageByNode"]
            assert all(u["GPU"][0] == 0 and u["CPU"][0] == 0 for u in usage.values()), usage
            jobs = await ray_client.list_jobs()
            assert latest_run(jobs) is None or not is_probe(latest_run(jobs))  # type: ignore[arg-type]
            findings = await preflight(build_spec("nemotron-3-ultra-550b-a55b-4layer"), ray_client)
            assert not [f for f in findings if f.rule in ("P1", "P3") and f.severity == "error"], findings
        # both consoles gone cleanly (leases given back): the probe ends at once
        await until(
            None,
            lambda: _none(ray_client),
            "the probe ending after its consoles left",
            timeout=30,
            interval=0.5,
        )
    finally:
        holder.unlink(missing_ok=True)
        override.unlink(missing_ok=True)


async def test_a_readonly_console_starts_none_reads_one_that_runs_and_a_late_node_is_sampled(
    ray_cluster: LocalRayCluster, ray_client: RayClient
) -> None:
    await _no_probe_left(ray_client)
    async with _consoles(ray_client, True) as (reader,):
        await until(
            None,
            lambda: "--readonly" in reader.status,
            "the read-only console saying it starts none",
            timeout=20,
        )
        await asyncio.sleep(0)  # (its look at the job list is done: nothing was submitted)
        assert await _probes(ray_client) == [] and reader.started == []
        async with _consoles(ray_client, False) as (writer,):
            await until(
                None,
                lambda: _alive(reader, ray_cluster),
                "the read-only console reading the probe",
                timeout=90,
                interval=0.3,
            )
            assert reader.started == [] and len(writer.started) == 1
            late = ray_cluster.add_node()
            try:
                await until(
                    None,
                    lambda: _alive(writer, ray_cluster, [ray_cluster.node_ids[late]]),
                    "the node that joined later sampled",
                    timeout=60,
                    interval=0.5,
                )
            finally:
                ray_cluster.kill_node(late)
    await _no_probe_left(ray_client)  # its consoles gave their leases back: it ends by itself


CONSOLE = """
import asyncio, sys, time
from backend.cluster.dashboard import RayClient
from backend.cluster.gpu_probe import GpuProbe

async def main():
    async with RayClient(sys.argv[1], timeout=30) as client:
        probe = GpuProbe(client, lease_timeout_s=float(sys.argv[2]), lease_renew_s=1.0)
        task = asyncio.create_task(probe.run())
        while not probe.fresh(time.time()):
            await asyncio.sleep(0.2)
        print("reading", flush=True)
        await task

asyncio.run(main())
"""


async def test_the_probe_is_gone_soon_after_its_last_console_is_sigkilled(
    ray_cluster: LocalRayCluster, ray_client: RayClient
) -> None:
    await _no_probe_left(ray_client)
    console = subprocess.Popen(
        [sys.executable, "-c", CONSOLE, ray_cluster.address, str(SHORT_LEASE_S)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert console.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(console.stdout.readline), 90)
        assert line.startswith("reading"), line
        assert len(await _probes(ray_client)) == 1
        console.send_signal(signal.SIGKILL)  # no clean exit: its lease stays behind, unrenewed
        killed = time.monotonic()
        await until(
            None,
            lambda: _none(ray_client),
            "the probe ending after its console's SIGKILL",
            timeout=60,
            interval=0.5,
        )
        gone = time.monotonic() - killed
        assert gone < 60, gone
        assert gone >= SHORT_LEASE_S - 2  # it waited for the lease, not for something else
    finally:
        console.kill()
        console.wait(10)
