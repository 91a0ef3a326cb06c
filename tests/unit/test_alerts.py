"""Red-flag alerts: rules as data, evaluated on every new point; controller hooks; derived signals."""

from __future__ import annotations

import math

import pytest

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.alerts import AlertEngine, AlertRuleError, load_rules
from backend.signals.derived import zero_std_fraction
from backend.signals.metrics import Point
from backend.signals.monitor import RunMonitor
from backend.signals.series import Series

TRAIN = "(MegatronTrainRayActor pid=52001, ip=10.0.0.2) "


def feed(engine: AlertEngine, key: str, values: list[float], start: int = 0) -> list[str]:
    """Push values through a series and the engine the way the collector does; return fired ids."""
    series = Series(key, "train/step")
    fired = []
    for i, v in enumerate(values, start):
        if series.add(i, v):
            fired += [a.id for a in engine.on_point(Point(key, i, v, math.nan, "log"), series)]
    return fired


def test_default_rules_cover_the_recipe_red_flags() -> None:
    ids = {r.id for r in load_rules()}
    assert ids >= {
        "shim-not-loaded",
        "shim-wrong-scaling",
        "shim-missing",
        "logprob-diff-high",
        "logprob-diff-climbing",
        "kl-spike",
        "reward-collapsed",
        "loss-nonfinite",
        "zero-std-groups",
        "truncated",
        "run-stalled",
        "phase-stalled",
        "job-failed",
        "node-dead",
    }
    assert {r.severity for r in load_rules() if r.id.startswith("shim")} == {"critical"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[[rule]]\nid='x'\nseverity='loud'\nwhen='above'\nmessage='m'\nmetrics=['a']\n", "severity"),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='sometimes'\nmessage='m'\n", "unknown check"),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='above'\nmessage='m'\n", "needs metrics"),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='log'\nmessage='m'\npattern='('\n", "bad pattern"),
        (
            "[[rule]]\nid='x'\nseverity='warning'\nwhen='stall'\nmessage='m'\n[[rule]]\nid='x'\nseverity='info'\nwhen='stall'\nmessage='m'\n",
            "unique",
        ),
        ("[[rule]\n", "cannot read"),
        (
            "[[rule]]\nid='x'\nseverity='warning'\nwhen='above'\nmessage='m'\nmetrics=['a']\n"
            "threshold=true\n",
            "threshold must be a number, a string or a list of strings",
        ),
        ("[[rule]]\nid='x'\nseverity='error'\nwhen='stall'\nmessage='m'\n", "critical, warning, info"),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='stall'\n", "needs a message"),
        ("[[rule]]\nseverity='warning'\nwhen='stall'\nmessage='m'\n", r"#1 \(no id\).*unique string id"),
        (
            "[[rule]]\nid='x'\nseverity='warning'\nwhen='key_missing'\nmessage='m'\n",
            "key_missing rule needs metrics",
        ),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='log'\nmessage='m'\nhints=['a']\n", "needs a pattern"),
        ("[[rule]]\nid='x'\nseverity='warning'\nwhen='log'\nmessage='m'\npattern='a'\n", "needs hints"),
        (
            "[[rule]]\nid='x'\nseverity='warning'\nwhen='log'\nmessage='m'\npattern='a'\nhints=['a', '']\n",
            "needs hints",
        ),
    ],
)
def test_bad_rule_files_are_one_clear_error(tmp_path, body: str, message: str) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text(body)
    with pytest.raises(AlertRuleError, match=message) as err:
        load_rules(path)
    assert "\n" not in str(err.value)


def test_shim_failure_lines_are_critical() -> None:
    engine = AlertEngine()
    fired = engine.on_log_text(
        sanitize_text(
            f"\x1b[36m{TRAIN}\x1b[0mmiles nemotron_h plugin failed to load: ImportError: no module named "
            "megatron.bridge\n(MegatronTrainRayActor pid=52002) miles nemotron_h shim for "
            f"routed_scaling_factor not applied: provider lacks field\n{TRAIN}miles nemotron_h "
            "plugin failed to load: ImportError: again\n"  # same actor: once
        )
    )
    assert [(a.id, a.severity) for a in fired] == [("shim-not-loaded", "critical")] * 2
    assert "megatron.bridge" in fired[0].message and "1.0x" in fired[0].message
    assert "provider lacks field" in fired[1].message


def test_shim_applied_lines_checked_and_recorded() -> None:
    engine = AlertEngine(expected_scaling=5.0)
    good = '{"moe_router_topk_scaling_factor": 5.0, "moe_router_num_groups": 1}'
    bad = '{"moe_router_topk_scaling_factor": 1.0}'
    fired = engine.on_log_text(
        f"{TRAIN}ultra-console shim: applied NemotronH provider fields {good}\n"
        f"(MegatronTrainRayActor pid=52002) ultra-console shim: applied NemotronH provider fields {bad}\n"
        "(MegatronTrainRayActor pid=52003) ultra-console "
        'shim: applied NemotronH provider fields {"other": 1}\n'
        "(MegatronTrainRayActor pid=52004) ultra-console "
        "shim: applied NemotronH provider fields {not json}\n"
    )
    assert [(a.key, a.id) for a in fired] == [
        ("MegatronTrainRayActor pid=52002", "shim-wrong-scaling"),
        ("MegatronTrainRayActor pid=52003", "shim-wrong-scaling"),
        ("MegatronTrainRayActor pid=52004", "shim-not-loaded"),
    ]  # unreadable JSON is never taken as applied
    assert all(a.severity == "critical" for a in fired)
    assert "moe_router_topk_scaling_factor=1" in fired[0].message and "needs 5" in fired[0].message
    assert engine.shim_reports == {}  # no process has been seen as a train actor beyond its shim line yet
    engine.shim.note_lines(
        "".join(
            f"(MegatronTrainRayActor pid={pid}) [2026-03-02 10:00:00] actor.py:1 - up\n"
            for pid in (52002, 52003, 52005)
        )
        + f"{TRAIN}[2026-03-02 10:00:00] x.py:1 - up\n"
    )
    assert set(engine.shim_reports) == {
        "MegatronTrainRayActor pid=52001, ip=10.0.0.2",
        "MegatronTrainRayActor pid=52002",
        "MegatronTrainRayActor pid=52003",
    }
    assert engine.shim.missing() == ["MegatronTrainRayActor pid=52005"]
    # the controller knows all train actors; these never logged the line
    missing = engine.on_shim_missing(["MegatronTrainRayActor pid=52005", "MegatronTrainRayActor pid=52006"])
    assert missing is not None and missing.id == "shim-missing" and "pid=52005" in missing.message
    assert engine.on_shim_missing([]) is None


def test_every_form_of_the_shim_line_is_understood() -> None:
    from shim import logline

    engine = AlertEngine(expected_scaling=5.0)
    fields = {"moe_router_topk_scaling_factor": 5.0}
    fired = engine.on_log_text(
        f"(pid=7001) {logline.applied(fields, mapping_only=True)}\n"
        f"(pid=7002) {logline.applied({'moe_router_topk_scaling_factor': 1.0}, mapping_only=True)}\n"
        f"(MegatronTrainRayActor pid=7003) {logline.not_applied('bridge has no NemotronH provider')}\n"
        f"(pid=7001) {logline.applied(fields)} [repeated 3x across cluster]\n"
    )
    assert [(a.id, a.key) for a in fired] == [
        ("shim-wrong-scaling", "pid=7002"),
        ("shim-not-loaded", "MegatronTrainRayActor pid=7003"),
    ]
    assert "bridge has no NemotronH provider" in fired[1].message
    assert engine.shim_lines_seen == 1 + 1 + 1 + 3
    engine.shim.note_lines("(MegatronTrainRayActor pid=7001) [2026-03-02 10:00:00] actor.py:1 - up\n")
    assert engine.shim_reports == {
        "MegatronTrainRayActor pid=7001": fields
    }  # the hook's `(pid=N)` line, trusted


def test_logprob_diff_high_and_climbing() -> None:
    key = "train/train_rollout_logprob_abs_diff"
    assert feed(AlertEngine(), key, [0.0107, 0.0110, 0.0105, 0.0109] * 5) == []
    assert feed(AlertEngine(), key, [0.01, 0.011, 0.06]) == ["logprob-diff-high"]
    assert feed(AlertEngine(), key, [0.01, 0.012, 0.016, 0.019, 0.024, 0.03]) == ["logprob-diff-climbing"]


def test_kl_spike_against_recent_median() -> None:
    steady = [0.001, 0.0012, 0.0009, 0.0011, 0.001, 0.0013]
    assert feed(AlertEngine(), "train/ppo_kl", steady) == []
    assert feed(AlertEngine(), "train/ppo_kl", [*steady, 0.05]) == ["kl-spike"]
    assert feed(AlertEngine(), "train/train_rollout_kl", [*steady, -0.05]) == ["kl-spike"]  # magnitude
    assert feed(AlertEngine(), "train/ppo_kl", [*steady, 0.009]) == []  # under the absolute floor
    assert feed(AlertEngine(), "train/ppo_kl", [0.001, 0.05]) == []  # not enough history yet


def test_reward_collapse_nonfinite_zero_std_truncated() -> None:
    assert feed(AlertEngine(), "rollout/raw_reward", [0.1, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0]) == [
        "reward-collapsed"
    ]
    assert feed(AlertEngine(), "rollout/raw_reward", [0.1, 0.2, 0.3, 0.2, 0.1, 0.2]) == []
    assert feed(AlertEngine(), "train/loss", [0.1, math.nan]) == ["loss-nonfinite"]
    assert feed(AlertEngine(), "train/grad_norm", [0.1, math.inf]) == ["loss-nonfinite"]
    assert feed(AlertEngine(), "derived/zero_std_frac", [0.2, 0.49, 0.5]) == ["zero-std-groups"]
    assert feed(AlertEngine(), "rollout/truncated_ratio", [0.1, 0.25]) == ["truncated"]


def test_an_alert_fires_once_per_episode() -> None:
    engine = AlertEngine()
    fired = feed(engine, "rollout/truncated_ratio", [0.3, 0.4, 0.5, 0.1, 0.3])
    assert fired == ["truncated", "truncated"]
    first = engine.alerts[0]
    assert (first.step, first.last_step, first.count) == (0, 2, 3)
    assert engine.alerts[1].to_json() == {
        "id": "truncated",
        "severity": "warning",
        "message": engine.alerts[1].message,
        "step": 4,
        "key": "rollout/truncated_ratio",
        "count": 1,
        "sample": "",
    }


def test_controller_hooks_job_failed_node_dead() -> None:
    engine = AlertEngine()
    assert engine.on_job_status("RUNNING") is None and engine.on_job_status("SUCCEEDED", "ok") is None
    alert = engine.on_job_status(
        "FAILED", "Job entrypoint command failed with exit code 1, last available logs: OOM"
    )
    assert alert is not None and alert.severity == "critical" and "exit code 1" in alert.message
    assert (
        engine.on_job_status(
            "FAILED", "Job entrypoint command failed with exit code 1, last available logs: OOM"
        )
        is None
    )
    node = engine.on_node_dead("abc123", "health check failed")
    assert (
        node is not None
        and node.id == "node-dead"
        and "abc123" in node.message
        and "health check failed" in node.message
    )
    assert engine.on_node_dead("abc123", "again") is None


def test_stall_uses_max_of_six_median_steps_and_thirty_minutes() -> None:
    engine = AlertEngine()
    assert engine.check_stall(now=1000 + 1799, last_metric_ts=1000, median_step_s=60) is None  # 30 min floor
    stalled = engine.check_stall(now=1000 + 1801, last_metric_ts=1000, median_step_s=60)
    assert stalled is not None and stalled.id == "run-stalled" and "30 min" in stalled.message
    assert (
        engine.check_stall(now=1000 + 3000, last_metric_ts=1000, median_step_s=60) is None
    )  # once per stall
    slow = AlertEngine()
    assert slow.check_stall(now=1000 + 3500, last_metric_ts=1000, median_step_s=600) is None  # 6 x 10 min
    assert slow.check_stall(now=1000 + 3700, last_metric_ts=1000, median_step_s=600) is not None
    assert slow.check_stall(now=math.nan, last_metric_ts=1000, median_step_s=1) is None


def test_phase_stall_names_a_starved_trainer() -> None:
    engine = AlertEngine()
    open_phases = {
        ("10.0.0.1", 3, "train", "train_wait"): 0.0,
        ("10.0.0.1", -1, "rollout_manager", "rollout"): 0.0,
    }
    medians = {"train_wait": 900.0, "rollout": 10.0}
    fired = engine.check_phases(open_phases, medians.get, now=2000.0)
    assert [a.key for a in fired] == ["rollout"]  # train_wait is under 6 x 900 s
    fired = engine.check_phases(open_phases, medians.get, now=6000.0)
    assert [a.key for a in fired] == ["train_wait"] and "starved of rollout data" in fired[0].message


def test_zero_std_fraction_from_miles_fields() -> None:
    values = {
        "rollout/zero_std/count_0.0": 5,
        "rollout/zero_std/count_1.0": 3,
        "rollout/zero_std/all_zero_percentage": 0.15625,
        "rollout/zero_std/all_one_percentage": 0.09375,
    }
    assert zero_std_fraction(values, None) == pytest.approx(8 / 32)  # groups inferred from count/percentage
    assert zero_std_fraction(values, 16) == pytest.approx(0.5)
    assert zero_std_fraction({"rollout/zero_std/count_0.5": 4}, 8) == 0.5
    assert (
        zero_std_fraction(
            {"rollout/zero_std/all_zero_percentage": 0.0, "rollout/zero_std/all_one_percentage": 0.0}, None
        )
        == 0.0
    )
    assert zero_std_fraction({"rollout/truncated_ratio": 0.1}, None) is None


def test_monitor_end_to_end_on_the_sample_log() -> None:
    run = SampleRun(rollouts=6, nan_at_step=9, save_every=2, shim_scaling=5.0, remote_ip="10.0.0.2")
    text = sanitize_text("\n".join(generate(run)) + "\n")
    chunked = RunMonitor()
    lines = text.splitlines(keepends=True)
    for i in range(0, len(lines), 37):  # batches of complete lines, as a LogStore delivers them
        chunked.feed_text("".join(lines[i : i + 37]))
    monitor = RunMonitor()
    monitor.feed_text(text)
    snap = monitor.snapshot(now=monitor.end_of_log())
    assert chunked.snapshot(now=chunked.end_of_log()) == snap  # chunking never changes the answer
    derived = snap["derived"]
    assert derived["throughput"]["rollout_gpus"] == 8  # learnt from Megatron's argument dump
    assert derived["throughput"]["cluster_tokens_per_sec"] == pytest.approx((13.5 + 5) * 8)
    assert derived["progress"]["rollouts_done"] == 6 and derived["progress"]["num_rollout"] == 30
    assert derived["progress"]["eta_s"] == pytest.approx(24 * 60.0)
    assert derived["time_per_rollout"]["rollout_over_train"] == pytest.approx((31.8 + 5) / 12.7)
    assert derived["checkpoint"]["count"] == 3 and derived["checkpoint"]["last_iteration"] == 12
    assert derived["checkpoint"]["since_s"] == pytest.approx(0.0)  # the log ends with the save
    later = monitor.snapshot(now=monitor.end_of_log() + 600)["derived"]
    assert later["checkpoint"]["since_s"] == pytest.approx(600) and later[
        "since_last_metric_s"
    ] == pytest.approx(603)
    assert derived["zero_std_frac"] == pytest.approx(0.25)

    # loss, pg_loss, grad_norm at step 9; and the NaN in the step dict is the failure catalog's divergence
    assert [a["id"] for a in snap["alerts"]] == ["loss-nonfinite"] * 3 + ["nan"]
    assert all(a["step"] == 9 for a in snap["alerts"][:3])
    assert snap["cause"]["id"] == "nan" and snap["cause"]["message"].startswith("train/loss is nan in ")
    assert snap["latest"]["train/loss"] == pytest.approx(-0.0003 * 12)
    assert snap["series"]["train/loss"][9] == [9, None]


def test_monitor_clock() -> None:
    clock = [5000.0]
    monitor = RunMonitor(clock=lambda: clock[0])  # as the console and replay build it, plus a test clock
    monitor.feed_text(f"{TRAIN}  num_rollout ......... 30\n")  # the run's shape comes from its argument dump
    assert monitor.facts.num_rollout == 30
    assert math.isnan(monitor.miles_now())
    monitor.feed_text(f"{TRAIN}[2026-08-21 10:00:00.000 actor_cell0_rank0] x.py:1 - hello\n")
    clock[0] += 90
    assert monitor.miles_now() == pytest.approx(monitor.end_of_log() + 90)


def test_shim_lines_folded_by_ray_dedup_still_count() -> None:
    engine = AlertEngine()
    fields = '{"moe_router_topk_scaling_factor": 5.0}'
    engine.on_log_text(
        f"(MegatronTrainRayActor pid=1) ultra-console shim: applied NemotronH provider fields {fields}\n"
        f"(MegatronTrainRayActor pid=9) ultra-console shim: applied NemotronH provider fields {fields}"
        " [repeated 127x across cluster] (Ray deduplicates "
        "logs by default. Set RAY_DEDUP_LOGS=0 to disable.)\n"
    )
    assert engine.shim_lines_seen == 128 and engine.alerts == []
    engine.shim.note_lines(
        "".join(f"(MegatronTrainRayActor pid={pid}) x.py:1 - up\n" for pid in range(1, 129))
    )
    assert set(engine.shim_reports) == {"MegatronTrainRayActor pid=1", "MegatronTrainRayActor pid=9"}
    assert engine.shim.missing() == []  # the 126 others are inside Ray's fold


def test_a_log_past_its_num_rollout_has_no_fraction_and_no_eta(tmp_path, capsys) -> None:
    """The sample log says num_rollout 30; 40 rollouts in it (a resumed run given a smaller num_rollout, or an
    earlier attempt's lines) must not read "40/30, ETA 0s", in the app or the CLI."""
    from console.cli import main

    text = sanitize_text("\n".join(generate(SampleRun(rollouts=40))) + "\n")
    monitor = RunMonitor()
    monitor.feed_text(text)
    progress = monitor.snapshot(now=monitor.end_of_log())["derived"]["progress"]
    assert (progress["rollouts_done"], progress["num_rollout"]) == (40, 30)
    assert progress["fraction"] is None and progress["eta_s"] is None
    log = tmp_path / "past.log"
    log.write_text(text, encoding="utf-8")
    main(["metrics", "--from-log", str(log)])
    out = capsys.readouterr().out
    assert "  progress: rollout 40 (past num_rollout 30), " in out and "ETA" not in out
