"""miles' GPU streams (`{dump_details}/dashboard/gpu_util/`, written here in miles' own line format) read
first, Ray's reporter second; readings age on screen and go stale after two reporter periods."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from backend.cluster.dashboard import JobInfo
from backend.cluster.miles_gpu_streams import MilesGpuStreams, dump_details_dir, parse_sample
from backend.cluster.telemetry import (
    STALE_AFTER_S,
    ClusterSnapshot,
    GpuSnapshot,
    NodeSnapshot,
    with_miles_samples,
)
from backend.plan.spec import build_spec
from backend.plan.submission import train_argv

T = 1_767_268_800.0


def _partition(root: Path, ts: float) -> Path:
    hour = datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%d_%H")
    path = root / "dashboard" / "gpu_util" / f"{hour}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _line(ts: float, node: str, gpu: int, util: object, mem: int) -> str:
    # miles' encoding: json.dumps(asdict(record), separators=(",", ":")), NaN as the bare token
    return (
        json.dumps(
            {"ts": ts, "node": node, "gpu": gpu, "util": util, "mem_mb": mem, "power_w": 612},
            separators=(",", ":"),
        )
        + "\n"
    )


def test_toggle_off_by_default_adds_miles_dashboard_with_a_1s_flush() -> None:
    off = build_spec("nemotron-3-ultra-550b-a55b-4layer", [])
    assert off.run.miles_dashboard is False
    assert "--use-miles-dashboard" not in train_argv(off, "r1")  # the launcher's argv, unchanged
    on = build_spec("nemotron-3-ultra-550b-a55b-4layer", ["run.miles_dashboard=true"])
    argv = train_argv(on, "r1")
    i = argv.index("--use-miles-dashboard")
    assert argv[i + 1 : i + 3] == ["--dashboard-flush-interval", "1"] and "--dump-details" in argv


def test_dump_dir_from_any_launcher_entrypoint() -> None:
    job = JobInfo(entrypoint="python3 /root/miles/train.py --colocate --dump-details /data/run7/dump --x 1")
    assert dump_details_dir(job) == Path("/data/run7/dump")
    assert dump_details_dir(JobInfo(entrypoint="python3 train.py --dump-details=/d/e")) == Path("/d/e")
    assert dump_details_dir(JobInfo(entrypoint="python3 train.py --dump-details rel/dir")) is None
    assert dump_details_dir(None) is None


def test_reader_tails_complete_lines_across_hour_partitions(tmp_path: Path) -> None:
    streams = MilesGpuStreams(tmp_path)
    assert not streams.present and streams.poll() == {}
    before = _partition(tmp_path, T - 10)  # 11:59:50 UTC: the previous hour's file
    now = _partition(tmp_path, T + 1)
    before.write_text(_line(T - 10, "10.0.0.1", 0, 40, 1000))
    with now.open("w") as fh:
        fh.write(_line(T + 1, "10.0.0.1", 0, 95, 61440) + "not json at all\n" + '{"ts":1.0,"node":"10.0.0.1"')
    got = streams.poll()
    assert streams.present and streams.malformed == 1
    assert got["10.0.0.1"][0].util == 95 and got["10.0.0.1"][0].mem_mb == 61440  # newest wins
    with now.open("a") as fh:  # the partial line completes; a NaN utilisation is "unknown", not 0 %
        fh.write(',"gpu":1,"util":NaN,"mem_mb":7}\n')
    got = streams.poll()
    assert got["10.0.0.1"][1].util is None and got["10.0.0.1"][1].mem_mb == 7
    assert parse_sample('{"ts": 1, "node": "n"}') is None


def _snap(age: float | None, taken_at: float = T) -> ClusterSnapshot:
    gpus = [
        GpuSnapshot(index=i, utilization_pct=10.0, mem_used_mb=615, mem_total_mb=143771) for i in range(2)
    ]
    node = NodeSnapshot(node_id="a" * 56, name="gpu-node", ip="10.0.0.1", gpus=gpus, telemetry_age_s=age)
    return ClusterSnapshot(nodes=[node], taken_at=taken_at)


def test_miles_samples_first_ray_second(tmp_path: Path) -> None:
    path = _partition(tmp_path, T)
    path.write_text(_line(T - 1, "10.0.0.1", 0, 97, 90000) + _line(T - 1, "10.0.0.1", 1, 50, 4000))
    streams = MilesGpuStreams(tmp_path)
    merged = with_miles_samples(_snap(6.0), streams.poll(), T)
    node = merged.nodes[0]
    assert node.gpu_source == "miles" and node.telemetry_age_s == 1.0
    assert [g.utilization_pct for g in node.gpus or []] == [97, 50]
    assert node.gpus and node.gpus[0].mem_total_mb == 143771  # Ray's total kept
    assert merged.sources == ("miles dashboard",)
    # 13 s old is normal at miles' defaults (sampler push 5 s + store flush 5 s): still miles', not stale
    normal = with_miles_samples(_snap(3.0, taken_at=T + 12), streams.poll(), T + 12)
    assert normal.nodes[0].gpu_source == "miles" and not normal.stale_at(normal.nodes[0], T + 12)
    # miles' samples gone quiet for longer than two of its periods: Ray's fresher reading is shown
    late = with_miles_samples(_snap(3.0, taken_at=T + 22), streams.poll(), T + 22)
    assert late.nodes[0].gpu_source == "ray" and late.sources == ("Ray reporter",)


def test_a_reading_ages_and_goes_stale_after_two_reporter_periods() -> None:
    assert STALE_AFTER_S == 10.0
    snap = _snap(4.0)
    node = snap.nodes[0]
    assert snap.age_at(node, T + 5) == 9.0 and not snap.stale_at(node, T + 5)
    assert snap.stale_at(node, T + 7) and snap.oldest_age(T + 7) == 11.0


def test_reader_is_cheap_on_a_long_stream(tmp_path: Path) -> None:
    """Tailing by byte offset: a second poll reads only what was appended (a day of 8 GPUs at 1 Hz)."""
    path = _partition(tmp_path, T)
    path.write_text("".join(_line(T + s, "10.0.0.1", g, 50, 1000) for s in range(3600) for g in range(8)))
    streams = MilesGpuStreams(tmp_path)
    streams.poll()
    first = streams.bytes_read
    line = _line(T + 3600, "10.0.0.1", 3, 99, 5)
    with path.open("a") as fh:
        fh.write(line)
    got = streams.poll()
    assert got["10.0.0.1"][3].util == 99
    assert streams.bytes_read - first == len(line)
