"""miles' structured outputs as a chart source: the dump dir from argv, a resumed run's `.trash_*` swap of
`events/` read with exact counts (written by the simulated trainer's own miles writers), chart sources."""

from __future__ import annotations

import math

from backend.demo.simtrainer.event_checkpoint import TRACKER, restore, snapshot
from backend.demo.simtrainer.milog import EventLog, MilesLog
from backend.signals.monitor import RunMonitor
from backend.signals.sources import chart_source, sources_by_key
from backend.signals.structured import StructuredFeed, dump_dir_of

SOURCE = {"component": "actor", "cell_index": 0, "rank_within_cell": 0}


def test_dump_dir_from_the_entrypoint():
    assert (
        dump_dir_of("python3 train.py --num-rollout 3 --dump-details /r/x/dump_details --colocate")
        == "/r/x/dump_details"
    )
    assert dump_dir_of("python3 train.py --dump-details='/r/a b/d'") == "/r/a b/d"
    assert dump_dir_of("python3 train.py --save /c") is None
    assert dump_dir_of("python3 train.py --dump-details") is None
    assert dump_dir_of("python3 'unclosed") is None


def _steps(events: EventLog, steps: range, value: float) -> None:
    for n in steps:
        events.metric({"train/loss": value + n, "train/step": n}, n)


def test_resumed_run_swaps_events_no_point_twice_none_lost(tmp_path):
    dump, save = tmp_path / "dump", tmp_path / "ckpt"
    log = MilesLog("main")
    monitor = RunMonitor()
    feed = StructuredFeed(monitor, str(dump))
    assert feed.poll() == 0 and not feed.state().present  # a live run's directory may come later
    events = EventLog(str(dump), "actor_cell0_rank0", SOURCE)
    _steps(events, range(0, 4), 0.0)
    (save).mkdir()
    (save / TRACKER).write_text("4\n")
    snapshot(str(dump), str(save), 4, log)  # the checkpoint after rollout 3 keeps steps 0..3
    _steps(events, range(4, 6), 0.0)
    assert feed.poll() == 6
    _steps(events, range(6, 7), 0.0)  # written by the first attempt after the last poll, before it died
    EventLog(str(dump), "rollout_manager", {"component": "rollout_manager"}).metric(
        {"perf/rollout_time": 3.0, "rollout/step": 3}, 3
    )  # ... and a file it began after the last poll
    assert restore(str(dump), str(save), log) == 4  # the resumed run: events/ -> .trash_*, snapshot copied in
    trash = [p.name for p in dump.iterdir() if p.name.startswith(".trash_")]
    assert len(trash) == 1 and sorted(p.name for p in (dump / "events").iterdir()) == [
        "actor_cell0_rank0.jsonl"
    ]
    resumed = EventLog(str(dump), "actor_cell0_rank0", SOURCE)
    _steps(resumed, range(4, 6), 100.0)  # redone after the checkpoint, with new values
    assert (
        feed.poll() == 4
    )  # step 6 and the new file from the trash, the resumed 4 and 5; the copied 0..3 skipped
    state = feed.state()
    assert (state.records, state.repeated_lines, state.swaps, state.bad_lines) == (10, 4, 1, 0)
    assert monitor.collector.series.by_key["perf/rollout_time"].steps == [3]
    loss = monitor.collector.series.get("train/loss")
    assert loss is not None
    assert loss.steps == [0, 1, 2, 3, 4, 5, 6]
    assert loss.values == [0.0, 1.0, 2.0, 3.0, 104.0, 105.0, 6.0]  # redone points replace the abandoned ones
    assert monitor.collector.records["step"] == 9
    _steps(resumed, range(6, 8), 100.0)
    assert feed.poll() == 2 and loss.values[-2:] == [106.0, 107.0]
    assert feed.poll() == 0  # nothing is read twice


def test_truncated_copy_without_a_dir_swap_is_not_counted_again(tmp_path):
    """A file replaced in place by a shorter copy of itself (same name, new inode) adds only its new lines."""
    dump = tmp_path / "dump"
    events = EventLog(str(dump), "rollout_manager", {"component": "rollout_manager"})
    for n in range(5):
        events.metric({"perf/rollout_time": 1.0 + n, "rollout/step": n}, n)
    monitor = RunMonitor()
    feed = StructuredFeed(monitor, str(dump))
    assert feed.poll() == 5
    path = dump / "events" / "rollout_manager.jsonl"
    head = path.read_bytes().split(b"\n")[:3]
    path.unlink()
    path.write_bytes(b"\n".join(head) + b"\n")
    events.metric({"perf/rollout_time": 9.0, "rollout/step": 3}, 3)
    assert feed.poll() == 1 and feed.state().repeated_lines == 3
    assert monitor.collector.series.by_key["perf/rollout_time"].values == [1.0, 2.0, 3.0, 9.0, 5.0]


def test_sources_per_chart(tmp_path):
    monitor = RunMonitor()
    monitor.feed_text(
        "(MegatronTrainRayActor pid=1) [2026-03-02 10:00:05.000 actor_cell0_rank0] log_utils.py:542 - "
        "step 0: {'train/loss': 0.5, 'train/ppo_kl': 0.0, 'train/step': 0}\n"
    )
    sources = sources_by_key(monitor.collector.series)
    assert sources == {"train/loss": "log", "train/ppo_kl": "log"}
    events = EventLog(str(tmp_path), "actor_cell0_rank0", SOURCE)
    events.metric({"train/loss": 0.5, "train/ppo_kl": 0.0, "train/step": 0}, 0)
    events.metric({"rollout/raw_reward": math.nan, "rollout/step": 0}, 0)
    feed = StructuredFeed(monitor, str(tmp_path))
    assert feed.poll() == 2
    sources = sources_by_key(monitor.collector.series)
    assert sources["train/ppo_kl"] == "events" and sources["rollout/raw_reward"] == "events"
    monitor.feed_text(
        "(MegatronTrainRayActor pid=1) [2026-03-02 10:00:06.000 actor_cell0_rank0] log_utils.py:542 - "
        "step 1: {'train/loss': 0.4, 'train/ppo_kl': 0.1, 'train/step': 1}\n"
    )
    sources = sources_by_key(monitor.collector.series)
    assert chart_source(sources, ["train/ppo_kl", "rollout/raw_reward"]) == "events+log"
    assert chart_source(sources, ["rollout/raw_reward"]) == "events"
    assert chart_source(sources, ["perf/step_time"]) == ""


def _telemetry_of(dump, writes):
    """The run's dashboard streams written through the simulated trainer's copy of miles' store (one flush per
    group of `writes`, as miles' collector flushes), read back as the console reads them."""
    from backend.demo.simtrainer.dashboard import DashboardStore
    from backend.signals.derived import DashboardStreams
    from backend.signals.dump_reader import DumpReader

    store, reader, tel = DashboardStore(dump / "dashboard"), DumpReader(dump, wait=True), DashboardStreams()
    for group in writes:
        for stream, record in group:
            store.append(stream, record)
        store.flush()
        tel.add(reader.poll())
    return tel


def test_a_late_close_never_closes_the_next_open_of_the_same_phase(tmp_path):
    """miles sends an open marker at once and closes in batches: the close of rollout 1 can land after the
    open of rollout 2 (old code: popped the phase on any close, so rollout 2 read as closed while it ran)."""
    lane = {"node": "10.0.0.1", "gpus": [], "rank": -1, "role": "rollout_manager"}
    tel = _telemetry_of(
        tmp_path,
        [
            [("phases", {"name": "rollout", "t0": 100.0, "t1": -1.0, **lane})],
            [
                ("phases", {"name": "rollout", "t0": 130.0, "t1": -1.0, **lane}),  # rollout 2 opens ...
                ("phases", {"name": "rollout", "t0": 100.0, "t1": 129.5, **lane}),
            ],  # ... before rollout 1's close
        ],
    )
    assert tel.open_phases == {("10.0.0.1", -1, "rollout_manager", "rollout"): 130.0}
    assert list(tel.phase_durations["rollout"]) == [29.5]
    tel2 = _telemetry_of(
        tmp_path / "b",
        [
            [("phases", {"name": "rollout", "t0": 130.0, "t1": 160.0, **lane})],
            [
                ("phases", {"name": "rollout", "t0": 130.0, "t1": -1.0, **lane})
            ],  # an open read after its own close
        ],
    )
    assert tel2.open_phases == {}


def test_fraction_gauges_are_averaged_over_engines_and_dp_ranks_never_summed(tmp_path):
    """token_usage, cache_hit_rate and kv_transfer_latency are per-engine fractions/latencies: two engines
    (one with two dp ranks) at 0.4/0.6 and 0.5 read 0.5 (mean of the engine means), not 1.5 (old code summed
    everything); counters and request gauges are still summed."""
    ts = 1755771600.0

    def row(addr: str, metric: str, value: float, dp: str) -> tuple[str, dict[str, object]]:
        return (
            "engine_series",
            {"ts": ts, "addr": addr, "metric": metric, "labels": {"dp_rank": dp}, "value": value},
        )

    a, b = "http://10.0.0.1:15000", "http://10.0.0.2:15000"
    tel = _telemetry_of(
        tmp_path,
        [
            [
                row(a, "sglang_token_usage", 0.4, "0"),
                row(a, "sglang_token_usage", 0.6, "1"),
                row(b, "sglang_token_usage", 0.5, "0"),
                row(a, "sglang_cache_hit_rate", 0.2, "0"),
                row(b, "sglang_cache_hit_rate", 0.8, "0"),
                row(a, "sglang_kv_transfer_latency_ms", 10.0, "0"),
                row(b, "sglang_kv_transfer_latency_ms", 30.0, "0"),
                row(a, "sglang_num_running_reqs", 16.0, "0"),
                row(a, "sglang_num_running_reqs", 4.0, "1"),
                row(b, "sglang_num_running_reqs", 8.0, "0"),
            ]
        ],
    )
    engines = tel.summary(ts).engines
    assert engines is not None
    totals = engines.totals
    assert math.isclose(totals["sglang_token_usage"], 0.5)
    assert math.isclose(totals["sglang_cache_hit_rate"], 0.5)
    assert math.isclose(totals["sglang_kv_transfer_latency_ms"], 20.0)
    assert totals["sglang_num_running_reqs"] == 28.0
