"""The simulated trainer in each miles log shape, its CUDA OOM death, and its structured outputs (events,
miles' dashboard streams, a resumed run's `.trash_*` swap) read live by the console's own reader."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import uuid
from collections import Counter
from pathlib import Path

import pytest
from runhelp import job_reaches
from waiting import until

from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.signals.monitor import RunMonitor
from backend.signals.structured import StructuredFeed

pytestmark = pytest.mark.ray

ANSI = re.compile(r"\x1b\[[0-9;]*m")
OLD = re.compile(  # miles until mid 2026: seconds, no process name, old actor names
    r"^\((?P<actor>MegatronTrainRayActor|RolloutManager) pid=\d+\) \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
    r"(?P<file>[\w.]+):\d+ - (?P<kind>step|perf|rollout) (?P<n>\d+): \{.*\}$"
)
BARE = re.compile(r"^(?P<kind>step|perf|rollout) (?P<n>\d+): \{.*\}$")


async def _run(client, tmp: Path, *extra: str, nodes: int = 2, rollouts: int = 2) -> tuple[str, Path]:
    sid = f"fmt-{uuid.uuid4().hex[:8]}"
    dump = tmp / sid / "dump_details"
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        str(nodes),
        "--num-rollout",
        str(rollouts),
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
        "--sim-step-seconds",
        "0.3",
        "--dump-details",
        str(dump),
        *extra,
    ]
    await client.submit({"entrypoint": shlex.join(argv), "submission_id": sid})
    return sid, dump


async def _log(client, sid: str) -> list[str]:
    return [ANSI.sub("", line) async for line in client.follow_log(sid)]


async def test_old_and_bare_shapes(ray_client, tmp_path):
    (old_sid, _), (bare_sid, bare_dump) = [
        await _run(ray_client, tmp_path, "--sim-log-format", f) for f in ("2026-04", "bare")
    ]
    old, bare = await asyncio.gather(_log(ray_client, old_sid), _log(ray_client, bare_sid))
    assert (await job_reaches(ray_client, old_sid, timeout=120)).status == "SUCCEEDED"
    assert (await job_reaches(ray_client, bare_sid, timeout=120)).status == "SUCCEEDED"

    parsed = [m for m in map(OLD.match, old) if m]
    kinds = Counter((m["kind"], m["actor"], m["file"]) for m in parsed)
    # 32*8/128 = 2 steps per rollout, each printed twice; both perf dicts per rollout
    assert kinds == {
        ("step", "MegatronTrainRayActor", "log_utils.py"): 4,
        ("step", "MegatronTrainRayActor", "model.py"): 4,
        ("rollout", "MegatronTrainRayActor", "log_utils.py"): 2,
        ("perf", "RolloutManager", "metrics.py"): 2,
        ("perf", "MegatronTrainRayActor", "train_metric_utils.py"): 2,
    }
    assert not any(".000 " in x or "actor_cell0_rank" in x.split(" - ")[0] for x in old if x.startswith("("))
    assert any(x.startswith("[20") and "placement_group.py:113 - Creating placement group" in x for x in old)

    metric = [m for m in map(BARE.match, bare) if m]
    assert Counter((m["kind"], m["n"]) for m in metric) == {
        ("step", "0"): 2,
        ("step", "1"): 2,
        ("step", "2"): 2,
        ("step", "3"): 2,
        ("rollout", "0"): 1,
        ("rollout", "1"): 1,
        ("perf", "0"): 2,
        ("perf", "1"): 2,
    }
    assert not any(x.startswith(("(", "[20")) for x in bare if "SIMULATED" in x or BARE.match(x))
    assert "Placement group ready: 2 train actors, 1 rollout manager" in bare  # a driver line, bare too
    events = sorted(p.name for p in (bare_dump / "events").iterdir())
    assert events == [
        "actor_cell0_rank0.jsonl",
        "rollout_manager.jsonl",
    ]  # the structured outputs do not change


async def test_cuda_oom_ends_failed_with_the_traceback(ray_client, tmp_path):
    sid, _ = await _run(
        ray_client, tmp_path, "--sim-oom-at-rollout", "1", "--sim-log-format", "2026-04", rollouts=4
    )
    lines = await _log(ray_client, sid)
    job = await job_reaches(ray_client, sid, timeout=120)
    assert job.status == "FAILED" and "CUDA out of memory" in (job.message or "")
    text = "\n".join(lines)
    malloc = [x for x in lines if "[torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM" in x]
    assert len(malloc) == 2 and all(
        x.startswith("(MegatronTrainRayActor pid=") for x in malloc
    )  # one per node
    assert "ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor.train()" in text
    oom = [x for x in lines if x.startswith("torch.OutOfMemoryError: ")]
    assert len(oom) == 1 and oom[0].startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3 has a total capacity "
        "of 139.80 GiB of which 1.02 GiB is free. Process "
    )
    assert text.index("Traceback (most recent call last):") < text.index("torch.OutOfMemoryError")
    assert not any(re.search(r" - step [45]: ", x) for x in lines)  # it died in rollout 1 (steps 2, 3)


async def test_events_and_dashboard_streams_read_live(ray_cluster, ray_client, tmp_path):
    sid, dump = await _run(
        ray_client,
        tmp_path,
        "--use-miles-dashboard",
        "--dashboard-flush-interval",
        "1",
        "--sim-unreadable-metrics",
        "--sim-step-seconds",
        "1",
        rollouts=4,
    )
    monitor = RunMonitor()
    feed = StructuredFeed(monitor, str(dump))
    reads: list[int] = []

    async def read_until_ended() -> bool:  # one read per poll: the feed is read while the run writes
        reads.append(feed.poll())
        return (await ray_client.get_job(sid)).is_terminal

    await until(None, read_until_ended, "the run's end", timeout=120, interval=0.5)
    job = await ray_client.get_job(sid)
    reads.append(feed.poll())
    assert job.status == "SUCCEEDED", job.message
    assert sum(1 for r in reads if r) >= 3  # read incrementally while it ran, not at the end
    lines = sum(len(p.read_text().splitlines()) for p in (dump / "events").glob("*.jsonl"))
    dashboard_metrics = len((dump / "dashboard" / "metrics.jsonl").read_text().splitlines())
    assert sum(reads) == lines + dashboard_metrics == 2 * (4 * 2 + 4 * 3)  # 8 steps, 4 x (rollout + 2 perf)
    assert feed.state().bad_lines == 0 and feed.state().repeated_lines == 0
    kl = monitor.collector.series.get("train/ppo_kl")
    assert kl is not None and kl.steps == list(
        range(8)
    )  # from events although every log step line is cut off

    dash = dump / "dashboard"
    meta = json.loads((dash / "meta.json").read_text())
    assert (
        set(meta) == {"run_name", "start_ts", "args", "schema_version"}
        and meta["args"]["rollout_num_gpus"] == 16
    )
    util = [
        json.loads(x) for p in sorted((dash / "gpu_util").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]
    assert all(list(u) == ["ts", "node", "gpu", "util", "mem_mb", "power_w"] for u in util)
    assert {u["gpu"] for u in util} == set(range(8)) and {u["node"] for u in util} == {"127.0.0.1"}
    ticks = Counter(u["ts"] for u in util)
    assert set(ticks.values()) == {8}  # each sample reads the 8 GPUs of one node at once
    stamps = sorted(ticks)
    samplers = len(ray_cluster.node_ids) - len(ray_cluster.dead)  # one per GPU node, as in miles
    per_second = (len(stamps) - samplers) / (stamps[-1] - stamps[0]) / samplers
    assert len(stamps) >= 5 * samplers and 0.7 < per_second < 1.3  # one sample per second per node
    assert max(u["mem_mb"] for u in util) == 615 + 60000  # the fake NVML's idle baseline + the actor's hold
    procs = [
        json.loads(x)
        for p in sorted((dash / "gpu_processes").glob("*.jsonl"))
        for x in p.read_text().splitlines()
    ]
    assert procs and all(list(p) == ["ts", "node", "gpu", "pid", "name", "mem_mb"] for p in procs)
    # the actor's hold; 0 where NVML listed the process in the moment before its allocation (seen on CI)
    held = {p["mem_mb"] for p in procs}
    assert 60000 in held and held <= {0, 60000} and any("MegatronTrainRayActor" in p["name"] for p in procs)
    phases = [
        json.loads(x) for p in sorted((dash / "phases").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]
    assert Counter((p["name"], p["t1"] == -1.0) for p in phases) == {
        ("rollout", True): 4,
        ("rollout", False): 4,
        ("train", True): 64,
        ("train", False): 64,
    }  # per rank
    assert json.loads((dash / "lane_catalog.json").read_text())["version"] == 1


async def test_resumed_run_swaps_events_and_the_reader_counts_each_point_once(ray_client, tmp_path):
    save = tmp_path / "ckpt"
    sid, dump = await _run(
        ray_client, tmp_path, "--save", str(save), "--save-interval", "1", nodes=1, rollouts=2
    )
    monitor = RunMonitor()
    feed = StructuredFeed(monitor, str(dump))
    assert (await job_reaches(ray_client, sid, timeout=120)).status == "SUCCEEDED"
    assert feed.poll() == 2 * 2 + 2 * 3  # 4 steps, 2 x (rollout, 2 perf)
    first = sum(len(p.read_text().splitlines()) for p in (dump / "events").glob("*.jsonl"))
    sub = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        "1",
        "--num-rollout",
        "4",
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
        "--sim-step-seconds",
        "0.3",
        "--dump-details",
        str(dump),
        "--save",
        str(save),
        "--load",
        str(save),
    ]
    resumed = f"resume-{uuid.uuid4().hex[:8]}"
    await ray_client.submit({"entrypoint": shlex.join(sub), "submission_id": resumed})
    lines = await _log(ray_client, resumed)
    assert (await job_reaches(ray_client, resumed, timeout=120)).status == "SUCCEEDED"
    assert any("Moved pre-restore event dir" in x for x in lines) and any(
        "Restored event dir" in x for x in lines
    )
    assert len(list(dump.glob(".trash_*"))) == 1
    got = feed.poll()
    assert got == 2 * 2 + 2 * 3  # only rollouts 2 and 3: the restored copy of 0 and 1 is not counted again
    assert feed.state().repeated_lines == first and feed.state().swaps == 1
    assert monitor.collector.series.by_key["train/ppo_kl"].steps == list(range(8))


def _series(lines: list[str]) -> dict[str, list[list[float | None]]]:
    """Every series the console's monitor reads from a log, except the wall-clock-dependent throughput."""
    monitor = RunMonitor()
    monitor.feed_text("\n".join(lines) + "\n")
    series = monitor.snapshot(now=0.0)["series"]
    return {
        k: v
        for k, v in series.items()
        if not (k.startswith("derived/") or "per_sec" in k or k == "perf/rollout_time")
    }


async def test_every_shape_gives_the_same_series(ray_client, tmp_path):
    runs = [await _run(ray_client, tmp_path, "--sim-log-format", f) for f in ("newest", "2026-04", "bare")]
    logs = [await _log(ray_client, sid) for sid, _ in runs]
    newest, old, bare = (_series(x) for x in logs)
    assert len(newest["train/ppo_kl"]) == 4 and len(newest["rollout/raw_reward"]) == 2
    assert old == newest
    assert bare == newest
