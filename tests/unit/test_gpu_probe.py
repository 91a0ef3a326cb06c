"""The console's GPU probe, the parts that need no cluster: its lines, where its readings go (before miles'
streams and Ray's reporter, per node), its lease, and that its job is marked as the console's
(tests/cluster/test_gpu_probe runs it on the real Ray test cluster)."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

from backend.cluster import gpu_probe_job
from backend.cluster.dashboard import JobInfo
from backend.cluster.gpu_probe import (
    LEASE_RENEW_S,
    LEASE_TIMEOUT_S,
    MARK,
    SCRIPT,
    STALE_AFTER_S,
    lease_dir_of,
    parse_line,
    parse_reading,
    probe_submission,
)
from backend.cluster.miles_gpu_streams import MilesGpuSample
from backend.cluster.telemetry import (
    ClusterSnapshot,
    GpuSnapshot,
    NodeSnapshot,
    with_miles_samples,
    with_probe_readings,
)
from backend.settings import Settings

T = 1_767_268_800.0
HEAD, WORKER = "aa" * 28, "bb" * 28


def _snap() -> ClusterSnapshot:
    ray_gpus = [
        GpuSnapshot(index=i, name="NVIDIA H200", utilization_pct=5.0, mem_used_mb=615, mem_total_mb=143771)
        for i in range(2)
    ]
    return ClusterSnapshot(
        nodes=[
            NodeSnapshot(
                node_id=HEAD, name="head", ip="10.0.0.1", gpus=ray_gpus, telemetry_age_s=6.0, is_head=True
            ),
            NodeSnapshot(node_id=WORKER, name="w1", ip="10.0.0.2", gpus=ray_gpus, telemetry_age_s=6.0),
        ],
        taken_at=T,
    )


def _line(obj: dict) -> str:
    return "some Ray prefix " + MARK + json.dumps(obj, separators=(",", ":"))


def test_a_probe_line_parses_into_a_reading_and_junk_does_not() -> None:
    obj = parse_line(
        _line(
            {
                "k": "s",
                "n": HEAD,
                "t": T,
                "c": 1.5,
                "g": [[0, 97, 61440, 143771, 612, 45, [[52001, 60825]]], [1, -1, 615, 143771, -1, -1, []]],
            }
        )
    )
    reading = parse_reading(obj or {})
    assert reading is not None and reading.node_id == HEAD and reading.cpu_s == 1.5
    g0, g1 = reading.gpus or ()
    assert (g0.util, g0.mem_used_mb, g0.power_w, g0.temp_c) == (97.0, 61440, 612, 45)
    assert g0.processes[0].pid == 52001 and g0.processes[0].mem_mb == 60825
    assert (g1.util, g1.power_w, g1.temp_c) == (None, None, None)  # NVML could not say: unknown, never 0
    missing = parse_reading({"k": "s", "n": WORKER, "t": T, "nvml": "no NVML \x1b[31manswers\x1b[0m"})
    assert (
        missing is not None
        and missing.gpus is None
        and "\x1b" not in missing.nvml
        and "answers" in missing.nvml
    )
    assert parse_line("a line without the mark") is None and parse_line(MARK + "{not json") is None
    assert parse_reading({"k": "s", "n": HEAD, "t": T, "g": [[0, "x"]]}) is None


def test_probe_first_then_miles_then_ray_per_node_each_with_its_own_staleness() -> None:
    probe = parse_reading(
        {"k": "s", "n": HEAD, "t": T - 1, "g": [[0, 97, 61440, 143771, 612, 45, [[52001, 60825]]]]}
    )
    assert probe is not None
    miles = {
        "10.0.0.1": {0: MilesGpuSample(T - 8, "10.0.0.1", 0, 50.0, 1)},
        "10.0.0.2": {0: MilesGpuSample(T - 8, "10.0.0.2", 0, 60.0, 2)},
    }
    snap = with_miles_samples(with_probe_readings(_snap(), {HEAD: probe}, T), miles, T)
    head, worker = snap.nodes
    assert head.gpu_source == "probe" and head.telemetry_age_s == 1.0
    assert head.gpus is not None and head.gpus[0].utilization_pct == 97.0 and head.gpus[0].power_w == 612
    assert head.gpus[0].name == "NVIDIA H200" and head.gpus[0].processes[0].pid == 52001
    assert worker.gpu_source == "miles" and not snap.stale_at(worker, T)  # 8 s is normal for miles
    assert snap.sources == ("GPU probe", "miles dashboard") and snap.oldest_age(T) == 8.0
    assert snap.stale_at(head, T + STALE_AFTER_S)  # the probe samples every second: 6 s old is stale
    later = with_probe_readings(_snap(), {HEAD: probe}, T + STALE_AFTER_S + 1)
    assert later.nodes[0].gpu_source == "ray"  # a probe that stopped gives way to the next source


def test_a_node_without_nvml_says_so() -> None:
    reading = parse_reading(
        {"k": "s", "n": WORKER, "t": T, "nvml": "no NVML (or AMD SMI) answers on this node"}
    )
    assert reading is not None
    node = with_probe_readings(_snap(), {WORKER: reading}, T).nodes[1]
    assert node.gpus is None and node.gpu_source == "probe" and node.gpu_note.startswith("no NVML")


def test_the_probe_job_is_the_consoles_reserves_nothing_and_creates_no_cuda_context(tmp_path: Path) -> None:
    payload = probe_submission(HEAD, tmp_path / "leases", lease_timeout_s=45, interval_s=1, max_age_s=3600)
    submission_id = payload["submission_id"]
    assert isinstance(submission_id, str) and submission_id.startswith("ultra-console-gpu-probe-")
    assert payload["entrypoint_label_selector"] == {"ray.io/node-id": HEAD}
    assert not any(k.startswith("entrypoint_num") or k == "entrypoint_resources" for k in payload)
    job = JobInfo.model_validate(
        {"submission_id": submission_id, "entrypoint": payload["entrypoint"], "metadata": payload["metadata"]}
    )
    assert lease_dir_of(job) == tmp_path / "leases"
    # Sampler actors reserve nothing; NVML only: no CUDA library is ever imported by the probe
    source = SCRIPT.read_text()
    assert "num_cpus=0, num_gpus=0" in source
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert not imported & {"torch", "cupy", "pycuda", "jax", "numba", "cuda"}


def test_leases_default_under_a_minute_and_expire(tmp_path: Path) -> None:
    assert LEASE_TIMEOUT_S <= 60.0 and LEASE_RENEW_S * 3 <= LEASE_TIMEOUT_S
    assert Settings().gpu_probe_lease_timeout_s <= 60.0 and Settings().gpu_probe
    (tmp_path / "console-a.lease").write_text("x")
    (tmp_path / "console-b.lease").write_text("x")
    old = time.time() - 50
    import os

    os.utime(tmp_path / "console-b.lease", (old, old))
    assert gpu_probe_job.fresh_leases(str(tmp_path), 45.0) == ["console-a"]
    assert gpu_probe_job.fresh_leases(str(tmp_path / "missing"), 45.0) == []


def test_one_probe_per_lease_dir_by_its_lock(tmp_path: Path) -> None:
    first = gpu_probe_job.take_lock(str(tmp_path))
    assert first is not None and gpu_probe_job.take_lock(str(tmp_path)) is None
    first.close()
    again = gpu_probe_job.take_lock(str(tmp_path))
    assert again is not None
    again.close()


def test_a_reading_goes_out_at_once_on_a_change_else_once_an_interval() -> None:
    sampler = gpu_probe_job.NodeSampler.__new__(gpu_probe_job.NodeSampler)
    sampler._sent, sampler._sent_at = None, -float("inf")
    idle: gpu_probe_job.Reading = {"t": 1.0, "g": [(0, 3, 615, 143771, 90, 30, [])]}
    assert sampler.due(idle, 1.0)  # the first one
    assert not sampler.due({**idle, "t": 1.25}, 1.0)  # nothing new within the interval
    assert not sampler.due({"t": 1.5, "g": [(0, 6, 700, 143771, 95, 31, [])]}, 1.0)  # below the steps
    assert sampler.due({"t": 1.5, "g": [(0, 97, 700, 143771, 95, 31, [])]}, 1.0)  # utilisation moved: at once
    assert sampler.due({"t": 1.75, "g": [(0, 97, 700, 143771, 95, 31, [[4242, 40000]])]}, 1.0)  # a new holder
    assert not gpu_probe_job.changed({"nvml": "x"}, {"nvml": "x"}) and gpu_probe_job.changed(
        {"nvml": "x"}, idle
    )
