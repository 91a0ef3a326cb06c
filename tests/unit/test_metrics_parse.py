"""miles' metric lines and structured outputs -> deduplicated series (every shape miles prints or writes)."""

from __future__ import annotations

import json
import math

import pytest

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.dump_reader import DumpReader, JsonlTail
from backend.signals.metrics import MetricsCollector, parse_metric_text, record_from_event
from backend.signals.pyliteral import LiteralError, parse_literal
from backend.signals.series import Series, axis_for

TRAIN = "(MegatronTrainRayActor pid=52001) "
RM = "(RolloutManager pid=51234) "


def clean(lines: list[str]) -> str:
    return sanitize_text("\n".join(lines) + "\n")


# ------------------------------------------------- the repr parser (numpy scalars, nan, inf in printed dicts)


def test_reprs_literal_eval_cannot_read() -> None:
    value = parse_literal(
        "{'a': nan, 'b': inf, 'c': -inf, 'd': np.float64(0.4375), 'e': np.int64(3), 'f': np.float32(1.5), "
        "'g': tensor(0.1000), 'h': tensor(2.5, device='cuda:0', dtype=torch.float64), 'i': np.bool_(True), "
        "'j': numpy.int32(-4), 'k': -np.float64(2.0), 'l': 1e-06, 'm': [1, (2,)], 'n': None, 'o': 'it\\'s'}"
    )
    assert isinstance(value, dict)
    assert math.isnan(value["a"]) and value["b"] == math.inf and value["c"] == -math.inf
    assert value["d"] == 0.4375 and value["e"] == 3 and isinstance(value["e"], int)
    assert (value["f"], value["g"], value["h"], value["i"], value["j"], value["k"]) == (
        1.5,
        0.1,
        2.5,
        True,
        -4,
        -2.0,
    )
    assert value["l"] == 1e-06 and value["m"] == [1, (2,)] and value["n"] is None and value["o"] == "it's"


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch /tmp/pwned')",
        "{'a': os.system}",
        "{'a': np.float64}",
        "{'a': open('x')}",
        "{'a': np.float64(1).real}",
        "{'a': (lambda: 1)()}",
        "[" * 200 + "]" * 200,
        "{'a': 1} trailing",
        "{'a': 1",
        "{'a': np.float64('x')}",
        "{[1]: 2}",
        "{'a': 1 + 2}",
        "{'a': 9" + "9" * 500 + "}",
    ],
)
def test_anything_else_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(LiteralError) as err:
        parse_literal(text)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- metric lines (`step N: {...}` and kin)


def test_sample_log_parses_to_one_point_per_step() -> None:
    run = SampleRun(rollouts=4, steps_per_rollout=2, eval_every=2, multi_turn=True)
    collector = MetricsCollector()
    collector.feed_text(clean(list(generate(run))))
    series = collector.series
    # `step N` twice per step -> one point per step, on train/step
    loss = series.by_key["train/loss"]
    assert loss is not None and loss.axis == "train/step" and loss.steps == list(range(8))
    # the second printing of each step dict is dropped, and counted
    assert collector.records["step"] == 8 and collector.duplicates == 8 and collector.last_step["step"] == 7
    # both perf kinds are told apart and land on rollout/step
    assert collector.records["perf-rollout"] == 4 and collector.records["perf-train"] == 4
    assert series.by_key["perf/tokens_per_gpu_per_sec"].values == [13.5, 14.5, 15.5, 16.5]
    assert series.by_key["perf/train_time"].steps == [0, 1, 2, 3]
    # rollout N carries no step key: N is the rollout id
    assert series.by_key["rollout/raw_reward"].steps == [0, 1, 2, 3]
    assert series.by_key["rollout/raw_reward"].values == pytest.approx([0.125, 0.175, 0.225, 0.275])
    # np.float64 pass@k and np.int64 multi-turn maxima become plain numbers
    assert series.by_key["passrate/pass@1"].values == pytest.approx([0.25, 0.26, 0.27, 0.28])
    assert series.by_key["multi_turn/multi_turn_metric/round_number_max"].values == [3.0] * 4
    # eval N on eval/step
    ev = series.by_key["eval/aime"]
    assert ev.axis == "eval/step" and ev.steps == [0, 2]
    # the recipe has no kl_loss
    assert series.get("train/kl_loss") is None
    assert "train/step" not in series.by_key and collector.problems == []


def test_nan_and_inf_are_points_not_errors() -> None:
    run = SampleRun(rollouts=2, nan_at_step=1)
    collector = MetricsCollector()
    collector.feed_text(clean(list(generate(run))))
    loss = collector.series.by_key["train/loss"]
    assert math.isnan(loss.values[1]) and loss.freeze().points()[1] == (1, None)
    assert collector.problems == []


def test_lines_with_ip_prefix_and_ansi_and_out_of_order_arrival() -> None:
    text = clean(
        [
            "\x1b[2m\x1b[36m(MegatronTrainRayActor pid=9, ip=10.0.0.7)\x1b[0m [2026-08-21 10:20:05.112 "
            "actor_cell0_rank96] log_utils.py:542 - step 5: {'train/loss': 0.5, 'train/step': 5}",
            (
                f"{TRAIN}[2026-08-21 10:19:05.112 actor_cell0_rank96] "
                "log_utils.py:542 - step 4: {'train/loss': 0.4, 'train/step': 4}"
            ),
        ]
    )
    collector = MetricsCollector()
    collector.feed_text(text)
    loss = collector.series.by_key["train/loss"]
    assert loss.steps == [4, 5] and loss.values == [0.4, 0.5]  # ordered on the step axis
    assert collector.latest()["train/loss"] == 0.5


def test_perf_kinds_by_file_source_and_keys() -> None:
    records, problems = parse_metric_text(
        clean(
            [
                (
                    f"{RM}[2026-08-21 10:19:40.311 rollout_manager] "
                    "metrics.py:89 - perf 3: {'perf/rollout_time': 31.8}"
                ),
                (
                    f"{TRAIN}[2026-08-21 10:20:05.402 actor_cell0_rank0] "
                    "train_metric_utils.py:56 - perf 3: {'perf/train_time': 12.7}"
                ),
                (
                    f"{RM}[2026-08-21 10:21:00.000 rollout_manager] "
                    "metrics.py:68 - eval 20 skipped: no eval data (snapshot)"
                ),
                (
                    f"{TRAIN}[2026-08-21 10:20:05.112 critic_cell0_rank0] "
                    "log_utils.py:542 - critic-step 2: {'train/value_loss': 0.1}"
                ),
                (
                    f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank0] "
                    "log_utils.py:542 - step 2: {'train/loss': 0.1, 'tr"
                ),
                (
                    f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank0] "
                    "log_utils.py:542 - step 3: {'train/loss': __import__('os')}"
                ),
                (
                    f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank0] "
                    "log_utils.py:99 - stepping 2: not a metric"
                ),
            ]
        )
    )
    kinds = [(r.kind, r.n) for r in records]
    assert kinds == [
        ("perf-rollout", 3),
        ("perf-train", 3),
        ("eval-skipped", 20),
        ("critic-step", 2),
        ("step", 2),  # cut mid-dict: its one complete pair, marked cut
    ]
    assert records[2].values == {"eval/skipped_no_eval_data_snapshot": 1.0}
    assert records[4].values == {"train/loss": 0.1} and records[4].cut and not records[3].cut
    assert len(problems) == 1 and "unknown name" in problems[0].reason


# --------------------------------------------- structured sources (events files, dashboard records) and dedup


def _event(metrics: dict, component: str = "actor", ts: str = "2026-08-21T10:20:05.112000Z") -> str:
    source = {"component": component} | (
        {"cell_index": 0, "rank_within_cell": 0} if component == "actor" else {}
    )
    return json.dumps(
        {
            "timestamp": ts,
            "source": source,
            "type": "metric",
            "rollout_id": 0,
            "attempt": 0,
            "metrics": metrics,
        }
    )


def test_event_records_and_null_nan() -> None:
    rec = record_from_event(json.loads(_event({"train/loss": None, "train/grad_norm": 0.1, "train/step": 7})))
    assert rec is not None
    assert (
        rec.kind == "step" and rec.n == 7 and math.isnan(rec.values["train/loss"]) and rec.source == "events"
    )
    assert rec.proc == "actor_cell0_rank0"
    assert record_from_event({"type": "span", "metrics": {}}) is None
    assert record_from_event({"type": "metric", "metrics": {"x": 1}}) is None  # no step key


def test_log_and_events_never_count_twice_and_events_win() -> None:
    collector = MetricsCollector()
    line = (
        f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank0] "
        "log_utils.py:542 - step 0: {'train/loss': 0.25, 'train/step': 0}"
    )
    collector.feed_text(clean([line, line.replace("log_utils.py:542", "model.py:854")]))
    rec = record_from_event(json.loads(_event({"train/loss": 0.2500001, "train/step": 0})))
    assert rec is not None
    collector.add_record(rec)
    collector.feed_text(clean([line]))  # the log line again (a re-read): lower priority, ignored
    loss = collector.series.by_key["train/loss"]
    assert loss.steps == [0] and loss.values == [0.2500001]


def test_dump_reader_reads_complete_lines_only(tmp_path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    path = events / "actor_cell0_rank0.jsonl"
    path.write_text(
        _event({"train/loss": 0.5, "train/step": 0})
        + "\n"
        + _event({"train/loss": 0.4, "train/step": 1})[:40]
    )
    (events / "rollout_manager.jsonl").write_text(
        _event(
            {"perf/rollout_time": 30.0, "perf/tokens_per_gpu_per_sec": 12.0, "rollout/step": 0},
            "rollout_manager",
        )
        + "\nnot json\n"
    )
    dash = tmp_path / "dashboard"
    (dash / "gpu_util").mkdir(parents=True)
    (dash / "phases").mkdir()
    (dash / "engine_series").mkdir()
    (dash / "meta.json").write_text(
        json.dumps({"run_name": "r", "start_ts": 1.0, "args": {"rollout_num_gpus": 8}})
    )
    (dash / "gpu_util" / "20260821_10.jsonl").write_text(
        '{"ts":1755771600.0,"node":"10.0.0.1","gpu":0,"util":95,"mem_mb":61440,"power_w":612}\n'
        '{"ts":1755771600.0,"node":"10.0.0.1","gpu":1,"util":NaN,"mem_mb":61440,"power_w":612}\n'
    )
    (dash / "phases" / "20260821_10.jsonl").write_text(
        '{"name":"actor_train","t0":1755771590.1,"t1":1755771599.7,"node":"10.0.0.1","gpus":[3],"rank":3,"role":"train"}\n'
        '{"name":"rollout","t0":1755771540.2,"t1":-1.0,"node":"10.0.0.1","gpus":[],"rank":-1,"role":"rollout_manager"}\n'
    )
    (dash / "engine_series" / "20260821_10.jsonl").write_text(
        '{"ts":1755771600.0,"addr":"http://10.0.0.1:15000","metric":"sglang_num_running_reqs","labels":{"dp_rank":"0"},"value":16.0}\n'
    )
    (dash / "metrics.jsonl").write_text(
        '{"ts":1755771605.4,"step_key":"train/step","step":0,"metrics":{"train/loss":0.5,"train/step":0}}\n'
    )
    reader = DumpReader(tmp_path)
    batch = reader.poll()
    kinds = sorted((r.source, r.kind, r.n) for r in batch.records)
    assert kinds == [("dashboard", "step", 0), ("events", "perf-rollout", 0), ("events", "step", 0)]
    assert len(batch.gpu_util) == 2 and math.isnan(batch.gpu_util[1].reading("util"))
    assert (
        len(batch.phases) == 2
        and len(batch.engine_series) == 1
        and batch.meta is not None
        and batch.meta.obj("args").whole("rollout_num_gpus") == 8
    )
    assert reader.bad_lines == 1
    # the cut-off line is consumed once it is complete; nothing is read twice
    with open(path, "a") as fh:
        fh.write(_event({"train/loss": 0.4, "train/step": 1})[40:] + "\n")
    again = reader.poll()
    assert (
        [(r.kind, r.n) for r in again.records] == [("step", 1)]
        and again.gpu_util == []
        and again.meta is None
    )
    # a new hourly partition is picked up
    (dash / "gpu_util" / "20260821_11.jsonl").write_text(
        '{"ts":1755775200.0,"node":"10.0.0.2","gpu":0,"util":5}\n'
    )
    assert len(reader.poll().gpu_util) == 1


def test_jsonl_tail_restarts_when_the_file_is_replaced(tmp_path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a":1}\n{"a":2}\n')
    tail = JsonlTail(path)
    assert [o["a"] for o in tail.read_new()] == [1, 2]
    path.write_text('{"a":3}\n')
    assert [o["a"] for o in tail.read_new()] == [3]
    path.unlink()
    assert tail.read_new() == []


# ---------------------------------------------------------------- series


def test_axes() -> None:
    assert axis_for("train/grad_norm") == "train/step"
    assert axis_for("eval/aime") == "eval/step"
    for key in (
        "rollout/raw_reward",
        "perf/step_time",
        "passrate/pass@1",
        "multi_turn/x",
        "derived/zero_std_frac",
    ):
        assert axis_for(key) == "rollout/step"


def test_series_memory_is_bounded_and_keeps_extremes() -> None:
    s = Series("train/loss", "train/step", max_points=512)
    for i in range(20000):
        value = math.sin(i / 50.0)
        if i == 1234:
            value = 99.0  # an old spike
        if i == 2345:
            value = -77.0
        if i == 3456:
            value = math.nan
        s.add(i, value)
    assert len(s) <= 512 and s.thinned > 19000
    assert 99.0 in s.values and -77.0 in s.values and any(math.isnan(v) for v in s.values)
    assert s.steps == sorted(s.steps) and s.steps[-1] == 19999  # recent points kept in full
    assert s.steps[-100:] == list(range(19900, 20000))


def test_series_replace_rules() -> None:
    s = Series("k", "rollout/step")
    assert s.add(1, 1.0, ts=10.0) and not s.add(1, 1.0, ts=11.0)  # same value: no change reported
    assert s.add(1, 2.0, ts=12.0) and s.values == [2.0]  # newer report of the step wins
    assert not s.add(1, 3.0, ts=5.0) and s.values == [2.0]  # an older one does not
    assert s.add(1, 4.0, ts=1.0, priority=2) and not s.add(1, 5.0, ts=99.0, priority=0)
    assert s.add(0, 0.5) and s.steps == [0, 1]


def test_a_metric_line_with_a_ray_repeat_suffix_still_parses() -> None:
    records, problems = parse_metric_text(
        f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank0] log_utils.py:542 - step 1: {{'train/loss': 0.5}}"
        " [repeated 2x across cluster]\n"
    )
    assert problems == [] and [(r.kind, r.n, r.values) for r in records] == [("step", 1, {"train/loss": 0.5})]


_SHAPES = (
    "(MegatronTrainRayActor pid=52001) [2026-08-21 10:02:00.000 actor_cell0_rank0] log_utils.py:542 - ",
    "(MegatronTrainRayActor pid=52001, ip=10.0.0.3) [2026-03-02 10:00:05] log_utils.py:443 - ",
    "(pid=7) [2026-03-02 10:00:05,123 rollout_manager] metrics.py:89 - ",
    "[2026-10-02 10:00:05.120 actor_cell0_rank0] log_utils.py:544 - ",
    "[2026-03-02 10:00:05 TP4 EP4] log_utils.py:1 - ",  # SGLang's tags: no process name
    "[2026-03-02 10:00:05 Tp4] log_utils.py:1 - ",
    "(raylet, ip=10.0.0.3) [2026-03-02 10:00:05] log_utils.py:1 - ",
    "(a(b) pid=1) [2026-03-02 10:00:05] x.py:1 - ",
    "[2026-03-02 10:00:05.1234567 p] x.py:1 - ",
    "[2026-03-02 10:00:05] INFO x.py:1: ",
    "^[[36m(A pid=1)^[[0m [2026-03-02 10:00:05] x.py:1 - ",
    "",
)
_MESSAGES = (
    "step 3: {'train/loss': 0.5, 'train/step': 3}",
    "perf 2: {'perf/step_time': 4.0, 'perf/actor_train_mfu': np.float64(0.3)}",
    "critic-step 1: {'critic/loss': nan}",
    "rollout 4: {'rollout/raw_reward': 1.0} [repeated 3x across cluster]",
    "eval 2 skipped: no data",
    "step 3: {'train/loss': ^[[1m0.5}",
    "step 3: {'train/loss': 0.5}\r",
)


@pytest.mark.parametrize("head", _SHAPES)
def test_the_one_match_shape_reads_what_the_full_grammar_reads(head: str, monkeypatch) -> None:
    """parse_metric_line reads the common shape with one regex (grammar.METRIC_LINE): every line gives the
    record the layered grammar gives (the one-match regex switched off to compare)."""
    from backend.signals import metrics

    for message in _MESSAGES:
        line = head + message
        fast = metrics.parse_metric_line(line)
        with monkeypatch.context() as patched:
            patched.setattr(metrics, "METRIC_LINE", __import__("re").compile(r"(?!)"))
            full = metrics.parse_metric_line(line)
        assert fast == full, line
