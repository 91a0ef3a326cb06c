"""DashboardStreams parsing on payloads captured from Ray 2.60 (tests/data/ray_samples, answers of
a real Ray 2.60 dashboard) plus dead-node merging as the state API reports it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import cast

import pytest

from backend.cluster.dashboard import RayClient
from backend.cluster.telemetry import ClusterSnapshot, GpuProcess, TelemetryPoller, parse_nodes_summary

SAMPLES = Path(__file__).parents[1] / "data" / "ray_samples"


def load(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def test_fake_gpu_summary_parses_every_node_and_gpu() -> None:
    raw = load("nodes_summary_fakegpu.json")
    snap = parse_nodes_summary(raw, taken_at=1796013861.0)
    assert len(snap.nodes) == 4
    head = snap.nodes[0]
    assert head.is_head and head.name == "fake-node-0" and head.alive and head.gpus is not None
    assert head.node_id.startswith("13395e20")
    assert [g.index for g in head.gpus] == list(range(8))
    assert head.gpus[0].utilization_pct == 87.0
    assert (head.gpus[0].mem_used_mb, head.gpus[0].mem_total_mb) == (43131, 143771)
    assert head.gpus[0].name == "NVIDIA H200 (fake)"
    assert head.logical_gpus_total == 8.0 and head.logical_gpus_used == 0.0
    # fake-node-3 is missing from nodeLogicalResources: usage unknown, not 0
    node3 = next(n for n in snap.nodes if n.name == "fake-node-3")
    assert node3.logical_gpus_used is None
    assert head.telemetry_age_s == pytest.approx(1796013861.0 - 1796013858.56543)
    assert not head.stale


def test_same_payload_full_response_or_data_only() -> None:
    raw = load("nodes_summary_fakegpu.json")
    a = parse_nodes_summary(raw, taken_at=1.0e9 * 1.8)
    b = parse_nodes_summary(raw["data"], taken_at=1.0e9 * 1.8)
    assert a == b


def test_h200_sample_and_staleness() -> None:
    raw = load("h200_nodes_summary_stale_under_load.json")
    now = raw["data"]["summary"][0]["now"]
    fresh = parse_nodes_summary(raw, taken_at=now + 3)
    old = parse_nodes_summary(raw, taken_at=now + 27)
    assert not fresh.nodes[0].stale and old.nodes[0].stale
    gpu = (old.nodes[0].gpus or [])[0]
    assert gpu.name == "NVIDIA H200" and gpu.mem_used_mb == 615 and gpu.processes == []


def test_no_gpu_telemetry_is_none_not_zero() -> None:
    raw = copy.deepcopy(load("nodes_summary_fakegpu.json"))
    for node in raw["data"]["summary"]:
        node["gpus"] = []
    snap = parse_nodes_summary(raw)
    assert all(n.gpus is None for n in snap.nodes)
    assert all(n.logical_gpus_total == 8.0 for n in snap.nodes)


def test_nvml_failure_and_processes() -> None:
    raw = copy.deepcopy(load("h200_nodes_summary_idle.json"))
    gpu = raw["data"]["summary"][0]["gpus"][0]
    gpu["utilizationGpu"] = -1
    gpu["processesPids"] = [
        {"pid": 4242, "gpuMemoryUsage": 40960, "gpuUtilization": 85},
        {"pid": 4243, "gpuMemoryUsage": 0, "gpuUtilization": 0},
    ]
    snap = parse_nodes_summary(raw)
    g = (snap.nodes[0].gpus or [])[0]
    assert g.utilization_pct is None
    assert g.processes == [GpuProcess(4242, 40960), GpuProcess(4243, 0)]
    holders = snap.gpu_holders()
    assert holders == {snap.nodes[0].node_id: [(0, GpuProcess(4242, 40960))]}


def test_dead_nodes_from_state_api_are_kept_with_reason() -> None:
    raw = load("nodes_summary_fakegpu.json")
    summary_ids = [n["raylet"]["nodeId"] for n in raw["data"]["summary"]]
    state = [
        {
            "node_id": summary_ids[0],
            "node_ip": "127.0.0.1",
            "is_head_node": True,
            "state": "ALIVE",
            "state_message": None,
            "node_name": "fake-node-0",
            "resources_total": {"GPU": 8.0},
        },
        # dying node: the summary still says ALIVE, the state API already knows better
        {
            "node_id": summary_ids[2],
            "node_ip": "127.0.0.1",
            "is_head_node": False,
            "state": "DEAD",
            "state_message": "Unexpected termination: health check failed due to missing too many heartbeats",
            "node_name": "fake-node-2",
            "resources_total": {"GPU": 8.0},
        },
        # long dead: gone from the summary
        {
            "node_id": "2e3455" + "0" * 50,
            "node_ip": "127.0.0.1",
            "is_head_node": False,
            "state": "DEAD",
            "state_message": "Expected termination: received SIGTERM",
            "node_name": "fake-node-5",
            "resources_total": {"GPU": 8.0},
        },
    ]
    snap = parse_nodes_summary(raw, state)
    assert len(snap.nodes) == 5
    dead = {n.name: n for n in snap.dead_nodes}
    assert set(dead) == {"fake-node-2", "fake-node-5"}
    assert "missing too many heartbeats" in (dead["fake-node-2"].death_reason or "")
    assert dead["fake-node-5"].death_reason == "Expected termination: received SIGTERM"
    assert dead["fake-node-5"].gpus is None
    assert len(snap.alive_nodes) == 3
    assert snap.nodes[-1].alive is False  # dead nodes sort last


def test_json_round_trip_is_stable() -> None:
    snap = parse_nodes_summary(load("nodes_summary_fakegpu.json"), taken_at=5.0, ray_version="2.60.0")
    text = snap.to_json()
    data = json.loads(text)
    assert set(data) == {"nodes", "taken_at", "ray_version", "gpu_source", "roles"}
    assert set(data["nodes"][0]) >= {
        "node_id",
        "ip",
        "hostname",
        "alive",
        "state",
        "death_reason",
        "is_head",
        "gpus",
        "logical_gpus_total",
        "logical_gpus_used",
    }
    assert set(data["nodes"][0]["gpus"][0]) >= {
        "index",
        "name",
        "utilization_pct",
        "mem_used_mb",
        "mem_total_mb",
        "processes",
    }
    assert ClusterSnapshot.from_json(text) == snap


def test_garbage_payload_gives_empty_snapshot() -> None:
    assert parse_nodes_summary({"data": {"summary": [{"nope": 1}, "x"]}}).nodes == []
    assert parse_nodes_summary({}).nodes == []


class CountingClient:
    """Serves captured payloads; counts requests by route (no network: the poller's budget logic).
    Stands in for `RayClient` (`as_ray`): the poller reads only these three routes."""

    def __init__(self) -> None:
        self.summary = load("nodes_summary_fakegpu.json")["data"]
        self.calls: dict[str, int] = {"summary": 0, "nodes": 0, "version": 0}

    async def version(self) -> dict:
        self.calls["version"] += 1
        return {"ray_version": "2.60.0"}

    async def nodes_summary(self) -> dict:
        self.calls["summary"] += 1
        return self.summary

    async def nodes(self) -> list:
        self.calls["nodes"] += 1
        return []

    def as_ray(self) -> RayClient:
        return cast(RayClient, self)


async def test_poller_reads_state_list_only_when_alive_set_changes() -> None:
    client = CountingClient()
    poller = TelemetryPoller(client.as_ray(), dead_refresh_s=3600, min_request_interval_s=0)
    for _ in range(5):
        snap = await poller.poll_once()
    assert snap.ray_version == "2.60.0"
    assert client.calls == {"summary": 5, "nodes": 1, "version": 1}
    client.summary = copy.deepcopy(client.summary)
    client.summary["summary"].pop()
    await poller.poll_once()
    assert client.calls["nodes"] == 2


async def test_poller_never_asks_faster_than_ray_refreshes() -> None:
    client = CountingClient()
    poller = TelemetryPoller(client.as_ray(), interval_s=0.5, min_request_interval_s=60)
    first = await poller.poll_once()
    for _ in range(10):
        assert await poller.poll_once() is first  # served from the last snapshot, no request
    assert client.calls == {"summary": 1, "nodes": 1, "version": 1}
