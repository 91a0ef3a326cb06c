"""The console's GPU probe, the parts that need no cluster: its lines, where its readings go (before miles'
streams and Ray's reporter, per node), its lease, and that its job is marked as the console's
(tests/cluster/test_gpu_probe runs it on the real Ray test cluster)."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

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
    # placed by the probe's actor (NodeAffinity to the head: any Ray 2.x), so no label selector (Ray >= 2.54)
    assert "entrypoint_label_selector" not in payload and payload["metadata"]["node_id"] == HEAD  # type: ignore[index]
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


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node: str) -> Path:
    """The probe's NVML module as the test cluster's fake answers it (fakegpu/fakenvml.py, pynvml's calls)."""
    import sys
    import types

    sys.path.insert(0, str(Path(gpu_probe_job.__file__).parents[1] / "demo" / "simtrainer" / "fakegpu"))
    import fakenvml

    monkeypatch.setenv("FAKE_GPU_DIR", str(tmp_path))
    monkeypatch.setenv("FAKE_GPU_COUNT", "2")
    fake = types.SimpleNamespace(**fakenvml.pynvml_calls(node), NVML_TEMPERATURE_GPU=0)
    monkeypatch.setattr(gpu_probe_job, "nvml_module", lambda: fake)
    base = tmp_path / node
    base.mkdir()
    return base


def test_nvml_read_directly_utilisation_and_memory_every_read_processes_when_memory_moves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    base = _fake_nvml(monkeypatch, tmp_path, HEAD)
    sampler = gpu_probe_job.NodeSampler()
    first = sampler.read()["g"]
    assert [g[:4] for g in first] == [(0, 0, 615, 143771), (1, 0, 615, 143771)] and first[0][6] == []
    assert first[0][4] == 90 and first[0][5] == 30  # W and degrees from pynvml's mW and C
    (base / "override.json").write_text(json.dumps({"1": {"util": 88}}))
    time.sleep(0.06)  # the fake re-reads its files every 50 ms
    assert sampler.read()["g"][1][1] == 88  # utilisation: every read
    (base / f"gpu0-{os.getpid()}.json").write_text(json.dumps({"mem": 40000, "util": 10}))
    time.sleep(0.06)
    held = sampler.read()["g"][0]
    assert held[2] == 40615 and held[6] == [[os.getpid(), 40000]]  # memory moved: the process list at once
    power_before = held[4]
    (base / f"gpu0-{os.getpid()}.json").write_text(json.dumps({"mem": 40010, "util": 90}))
    time.sleep(0.06)
    again = sampler.read()["g"][0]
    assert again[6] == [[os.getpid(), 40000]] and again[4] == power_before  # within PROCS_EVERY_S: kept


def test_no_nvml_is_said_in_every_reading(monkeypatch) -> None:
    def broken() -> object:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(gpu_probe_job, "nvml_module", broken)
    reading = gpu_probe_job.NodeSampler().read()
    assert "g" not in reading and "libnvidia-ml" in reading["nvml"] and "c" in reading


async def test_the_console_reads_the_head_file_at_once_and_says_how_old_when_it_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import asyncio

    from backend.cluster import gpu_probe

    lease_dir = tmp_path / "gpu-probe-s"
    lease_dir.mkdir(mode=0o700)
    hub = gpu_probe_job.Hub()
    hub.opts = gpu_probe_job.Options(
        node_id=HEAD, lease_dir=str(lease_dir), lease_timeout=45, interval=1, max_age=3600
    )
    said: list[str] = []
    console = gpu_probe.GpuProbe(None, lease_home=tmp_path, on_status=said.append)  # type: ignore[arg-type]
    monkeypatch.setattr(gpu_probe, "STALE_AFTER_S", 0.5)
    monkeypatch.setattr(gpu_probe, "PROBE_GONE_S", 1.5)
    hub._put(HEAD, {"t": time.time(), "g": [(0, 97, 61440, 143771, 612, 45, [[52001, 60825]])], "c": 0.1})
    hub.leases = [console.lease_id]
    hub._write()
    follow = asyncio.create_task(console._follow_file(lease_dir))
    await asyncio.wait_for(console.updated.wait(), 1.0)  # read within a poll or two of the write
    reading = console.readings[HEAD]
    assert reading.gpus is not None and reading.gpus[0].util == 97.0 and console.lease_seen
    console.updated.clear()
    hub._put(WORKER, {"t": time.time(), "nvml": "no NVML here", "c": 0.0})
    written = time.monotonic()
    hub._write()
    await asyncio.wait_for(console.updated.wait(), 1.0)
    assert time.monotonic() - written < 0.3 and console.readings[WORKER].gpus is None
    await asyncio.wait_for(follow, 5.0)  # nothing more written: said with its age, then given up
    stale = [t for t in said if "no reading for" in t]
    assert stale and "stopped changing" in stale[0] and "looking for a probe again" in stale[-1], said
    # a probe that ends says why in its last file
    follow = asyncio.create_task(console._follow_file(lease_dir))
    hub._write(bye="no console renewed a lease in 45 s")
    await asyncio.wait_for(follow, 2.0)
    assert said[-1] == "GPU probe ended: no console renewed a lease in 45 s"


def test_the_file_is_replaced_whole_and_never_through_a_link(tmp_path: Path) -> None:
    import os

    from backend.safe_paths import PrivateDir, UnsafePath

    lease_dir = tmp_path / "d"
    folder = PrivateDir(lease_dir)
    folder.replace("readings.json", b"one")
    ino = os.lstat(lease_dir / "readings.json").st_ino
    folder.replace("readings.json", b"two")
    assert (lease_dir / "readings.json").read_bytes() == b"two" and not (
        lease_dir / "readings.json.tmp"
    ).exists()
    assert os.lstat(lease_dir / "readings.json").st_ino != ino  # a new file: a reader never sees half of one
    (lease_dir / "readings.json.tmp").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePath):
        folder.replace("readings.json", b"three")
    assert not (tmp_path / "elsewhere").exists()


def test_every_node_reads_on_the_whole_second_the_samplers_a_lead_before_the_hub() -> None:
    at = gpu_probe_job.next_read_at
    lead = gpu_probe_job.LEAD_S
    assert at(100.2) == 101.0 and at(100.6) == 102.0  # at least half a period ahead: never twice a second
    assert at(100.2, lead) == pytest.approx(101.0 - lead) and at(100.95, lead) == pytest.approx(102.0 - lead)
    ticks = [at(t / 10) for t in range(1000, 1100)]
    assert all(
        t == int(t) and 0.5 <= t - s / 10 <= 1.5 for t, s in zip(ticks, range(1000, 1100), strict=True)
    )


def test_the_hub_writes_a_relayed_reading_with_its_own_tick_unless_it_came_well_before(
    tmp_path: Path,
) -> None:
    import threading

    hub = gpu_probe_job.Hub()
    hub.opts = gpu_probe_job.Options(
        node_id=HEAD, lease_dir=str(tmp_path / "d"), lease_timeout=45, interval=1, max_age=3600
    )
    writes: list[float] = []
    real_write = hub._write

    def write(bye: str = "") -> None:
        writes.append(time.time())
        real_write(bye)

    hub._write = write  # type: ignore[method-assign]
    tick = time.time() + 0.8
    reading: gpu_probe_job.Reading = {"t": time.time(), "g": [(0, 97, 700, 143771, 95, 31, [])], "c": 0.1}
    hub._put(WORKER, reading)  # well before the tick (a node whose clock is off): written on its own
    threading.Timer(0.8 - gpu_probe_job.LEAD_S, hub._put, (WORKER, reading)).start()  # in the lead window
    hub._until(tick)
    assert time.time() >= tick and len(writes) == 1 and writes[0] < tick - 0.5, writes
    assert hub.news.is_set()  # the second one is left for the tick's own write
    body = json.loads((tmp_path / "d" / "readings.json").read_text())
    assert body["k"] == "readings" and body["nodes"][WORKER]["g"][0][1] == 97


def test_a_held_lease_directory_is_checked_again_at_every_write(tmp_path: Path) -> None:
    import os

    from backend.safe_paths import PrivateDir, UnsafePath

    folder = PrivateDir(tmp_path / "d")
    folder.replace("readings.json", b"one")
    os.chmod(tmp_path / "d", 0o777)  # another user could now swap its files
    with pytest.raises(UnsafePath):
        folder.replace("readings.json", b"two")
    assert (tmp_path / "d" / "readings.json").read_bytes() == b"one"
    folder.close()


def test_the_job_sees_a_running_hubs_lock_itself(tmp_path: Path) -> None:
    assert not gpu_probe_job.lock_held(str(tmp_path))  # free: the job asks the hub to start
    held = gpu_probe_job.take_lock(str(tmp_path))
    assert held is not None and gpu_probe_job.lock_held(str(tmp_path))  # a hub samples: duplicate, no call
    held.close()
    assert not gpu_probe_job.lock_held(str(tmp_path))
