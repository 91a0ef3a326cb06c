"""backend.signals.compare and backend.signals.launch_flags, pure: step alignment, the differences at the
latest common step, the divergence step (threshold and `sustain` from configs/charts.toml), unique labels,
and the flag diff that names exactly the flags that differ and never a secret."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from backend.cluster.audit import AuditEntry, last_launch_command
from backend.signals.chart_specs import ChartConfigError, load_charts
from backend.signals.compare import (
    CompareConfig,
    ComparedMetric,
    RunSide,
    compare,
    divergence,
    load_config,
    unique_labels,
)
from backend.signals.launch_flags import ArgumentDump, diff_flags, flags_from_command
from backend.signals.series import SeriesSetSnapshot, SeriesSnapshot, axis_for

SECRET = "hf_SUPERSECRETTOKEN123"
WANDB = "0123456789abcdef0123456789abcdef01234567"


def series(**points: list[tuple[float, float]]) -> SeriesSetSnapshot:
    by_key = {}
    for name, pts in points.items():
        key = name.replace("__", "/")
        by_key[key] = SeriesSnapshot(
            key, axis_for(key), tuple(float(s) for s, _ in pts), tuple(v for _, v in pts)
        )
    return SeriesSetSnapshot(MappingProxyType(by_key))


def test_the_shipped_config_reads():
    config = load_config()
    assert [m.chart for m in config.metrics] == ["throughput", "time", "kl", "reward"]
    assert all(m.sustain >= 1 for m in config.metrics)
    assert [m.zero for m in config.metrics] == [True, True, False, False]  # a rate, a duration; KL, reward
    charts = load_charts()
    assert [c.id for c in charts.run_charts] == ["throughput", "time", "kl"]  # reward: only compared
    for metric in config.metrics:  # the comparison overlays a series of the chart the single run draws
        assert metric.key in charts.spec(metric.chart).keys


CHART = "[[chart]]\nid = 'x'\ntitle = 'X'\nseries = [{ key = 'k', label = 'k' }]\n"


def test_a_bad_config_is_one_error(tmp_path):
    bad = tmp_path / "charts.toml"
    bad.write_text("[[chart]]\nid = 'x'\n")
    with pytest.raises(ChartConfigError, match=r"cannot read the chart settings .*chart\.0\.title"):
        load_config(bad)
    bad.write_text(CHART + "compare = { key = 'k', title = 'k', abs = [1] }\n")
    with pytest.raises(ChartConfigError, match="abs: Input should be a valid number"):
        load_config(bad)
    bad.write_text(CHART + "compare = { key = 'other', title = 'k' }\n")
    with pytest.raises(ChartConfigError, match="compare key 'other' is none of its series"):
        load_config(bad)
    bad.write_text(CHART + CHART)
    with pytest.raises(ChartConfigError, match="chart ids used twice: x"):
        load_config(bad)
    bad.write_text(CHART.replace("label = 'k'", "label = 'k', kind = 'speed'"))
    with pytest.raises(ChartConfigError, match="kind"):
        load_config(bad)


def test_a_config_metric_reads_its_defaults_and_numeric_text(tmp_path):
    good = tmp_path / "charts.toml"
    good.write_text("[headline]\nkl = 'k'\n" + CHART + "compare = { key = 'k', title = 'k', rel = '0.5' }\n")
    config = load_config(good)
    assert config.kl == "k" and config.metrics == (ComparedMetric("k", "x", "k", 0.0, 0.5, 1),)


def test_divergence_needs_sustained_steps_both_logged():
    metric = ComparedMetric("train/ppo_kl", "kl", "KL", abs=0.01, rel=0.0, sustain=2)
    first = [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0), (5, 0.0)]
    other = [(0, 0.0), (1, 0.05), (2, 0.0), (4, 0.05), (5, 0.06)]  # 1 is a lone spike; 3 missing in other
    found = divergence(metric, "b", first, other)
    assert found is not None and (found.step, found.first, found.other) == (4, 0.0, 0.05)
    assert divergence(ComparedMetric("k", "c", "t", abs=0.1), "b", first, other) is None


def test_compare_aligns_by_step_and_reports_latest_common_differences():
    config = CompareConfig(
        (
            ComparedMetric("train/ppo_kl", "kl", "KL", abs=0.001, sustain=1),
            ComparedMetric("rollout/raw_reward", "reward", "reward", abs=0.05, sustain=1),
        )
    )
    live = RunSide(
        "run",
        "RUNNING",
        series(train__ppo_kl=[(0, 0.0), (1, 0.001), (2, 0.002)], rollout__raw_reward=[(0, 0.1), (1, 0.2)]),
        live=True,
    )
    base = RunSide(
        "run",
        "SUCCEEDED",
        series(
            train__ppo_kl=[(0, 0.0), (1, 0.001), (2, 0.01), (3, 0.02)],
            rollout__raw_reward=[(0, 0.1), (1, 0.3), (2, 0.4)],
        ),
    )
    got = compare([live, base], config)
    assert [r.label for r in got.runs] == ["run", "run (2)"]  # a legend never names two runs alike
    first, other = got.runs
    assert (first.last_step, first.kl, first.kl_delta) == (2, 0.002, None)
    assert other.kl_delta is not None and (
        other.kl_delta.step,
        other.kl_delta.value,
        other.kl_delta.first,
    ) == (2, 0.01, 0.002)  # at the latest step both logged, not the baseline's last (3)
    assert other.reward_delta is not None and other.reward_delta.step == 1
    assert [(d.key, d.step) for d in other.divergences] == [("train/ppo_kl", 2), ("rollout/raw_reward", 1)]
    assert "diverges: train/ppo_kl from step 2, rollout/raw_reward from rollout 1" in other.text()
    data = json.loads(json.dumps(got.to_json(), allow_nan=False))
    assert data["metrics"][0]["runs"][1]["points"] == [[0, 0.0], [1, 0.001], [2, 0.01], [3, 0.02]]
    assert got.changes == (("run (2)", None),)  # flags unknown: said, never guessed


def test_labels_are_clean_and_unique():
    assert unique_labels(["a\x1b]52;c;ZXZpbA==\x07.log", "a.log", "a.log", ""]) == [
        "a.log",
        "a.log (2)",
        "a.log (3)",
        "run",
    ]


def test_argv_flags_and_their_diff_name_exactly_what_differs_and_no_secret():
    before = flags_from_command(
        f"WANDB_API_KEY={WANDB} python3 /root/miles/train.py --rollout-batch-size 32 --lr 1e-6 --use-kl-loss "
        f"--eval-prompt-data aime /d/aime.jsonl --wandb-key {WANDB} --hf-token={SECRET} --num-rollout 100"
    )
    after = flags_from_command(
        f"WANDB_API_KEY={WANDB} python3 /root/miles/train.py --rollout-batch-size 64 --lr 1e-06 "
        f"--eval-prompt-data aime /d/aime2.jsonl --wandb-key {WANDB} --hf-token=other-{SECRET} "
        "--num-rollout 100 --colocate"
    )
    assert before is not None and after is not None
    assert before.flags["--use-kl-loss"].shown == "True" and before.flags["--wandb-key"].shown == "***"
    diff = diff_flags(before, after)
    assert diff is not None
    assert [c.flag for c in diff.changes] == [
        "--colocate",
        "--eval-prompt-data",
        "--hf-token",
        "--rollout-batch-size",
        "--use-kl-loss",
    ]  # 1e-6 == 1e-06
    assert [c.text() for c in diff.changes] == [
        "--colocate (unset) → True",
        "--eval-prompt-data aime /d/aime.jsonl → aime /d/aime2.jsonl",
        "--hf-token *** → ***",
        "--rollout-batch-size 32 → 64",
        "--use-kl-loss True → (unset)",
    ]
    shown = json.dumps(diff.to_json()) + repr(before) + repr(after)
    assert SECRET not in shown and WANDB not in shown
    hostile = flags_from_command("python3 train.py '--x\x1b]52;c;ZXZpbA==\x07' 1 --y '\x1b[2Jv'")
    assert hostile is not None and "\x1b" not in repr(hostile.flags)  # no escape sequence from a command line


def test_a_dump_compares_with_an_argv_on_the_flags_both_name():
    dump = ArgumentDump()
    prefix = "(MegatronTrainRayActor pid=7) "
    log = (
        "\n".join(
            [
                f"{prefix}noise ... before the dump",
                f"{prefix}" + "-" * 24 + " arguments " + "-" * 24,
                f"{prefix}  rollout_batch_size ........................ 64",
                f"{prefix}  lr ........................................ 2e-06",
                f"{prefix}  wandb_key ................................. {WANDB}",
                f"{prefix}  seed ...................................... 1234",
                f"{prefix}" + "-" * 20 + " end of arguments " + "-" * 21,
                f"{prefix}  loading .......... done",
            ]
        )
        + "\n"
    )
    lines = log.splitlines(keepends=True)
    dump.on_lines(0, 3, "".join(lines[:3]))  # lines arrive in batches of whole lines (LogStore.subscribe)
    dump.on_lines(3, 5, "".join(lines[3:]))
    flags = dump.flags()
    assert flags is not None and set(flags.flags) == {"--rollout-batch-size", "--lr", "--wandb-key", "--seed"}
    argv = flags_from_command("python3 train.py --rollout-batch-size 32 --lr 2e-6 --wandb-key x --colocate")
    diff = diff_flags(flags, argv)
    assert diff is not None and [c.flag for c in diff.changes] == ["--rollout-batch-size", "--wandb-key"]
    assert diff.uncompared == 2  # --seed (dump only), --colocate (argv only)
    assert WANDB not in repr(flags) + json.dumps(diff.to_json())


def test_a_dump_without_its_end_is_read_over_its_span_only():
    """Without an end line the dump is the next DUMP_SPAN lines, within one chunk too: a line shaped like a
    dump entry further on is not an argument (and the rest of a big chunk is never searched)."""
    from backend.signals.launch_flags import DUMP_SPAN

    head = ["-" * 24 + " arguments " + "-" * 24, "  lr ........................................ 2e-06"]
    filler = [f"line {i}" for i in range(DUMP_SPAN)]
    late = ["  seed ...................................... 1234"]
    for cut in (None, 1000):  # the whole log in one chunk, and in two
        dump = ArgumentDump()
        lines = [f"{x}\n" for x in head + filler + late]
        if cut is None:
            dump.on_lines(0, len(lines), "".join(lines))
        else:
            dump.on_lines(0, cut, "".join(lines[:cut]))
            dump.on_lines(cut, len(lines) - cut, "".join(lines[cut:]))
        flags = dump.flags()
        assert flags is not None and set(flags.flags) == {"--lr"}


def test_audit_log_launch_gives_the_flags():
    launch = "ray job submit --submission-id j1 -- python3 train.py --num-rollout 3"
    entries = [
        AuditEntry("t0", "op", "launch", "j1", launch, "submitted"),
        AuditEntry("t1", "op", "abort", "j1", "POST /api/jobs/j1/stop", "STOPPED"),
    ]
    flags = flags_from_command(last_launch_command(entries, "j1"), "audit")
    assert flags is not None and flags.source == "audit" and flags.flags["--num-rollout"].shown == "3"
    assert last_launch_command(entries, "j2") == ""


def test_metrics_compare_keeps_the_first_runs_exit_status(tmp_path, capsys):
    """`metrics --from-log A --compare B --json`: A failed (CUDA OOM) -> exit 4 as before, the comparison is
    printed all the same; a --compare path that is no run is one line, exit 1, before any work."""
    import miles_log_shapes as shapes

    from console.cli import main

    failed, good = tmp_path / "failed.log", tmp_path / "good.log"
    failed.write_text(
        shapes.text(shapes.Shape("2026-04", rollouts=2)) + "\n".join(shapes.OOM_TRACEBACK) + "\n"
    )
    good.write_text(shapes.text(shapes.Shape("newest", rollouts=3)))
    assert main(["metrics", "--from-log", str(failed), "--compare", str(good), "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert {"series", "latest", "derived", "alerts", "cause", "problems", "compare"} <= set(out)
    runs = out["compare"]["runs"]
    assert [(r["label"], r["state"], r["last_step"]) for r in runs] == [
        ("failed.log", "FAILED", 3),
        ("good.log", "SAVED", 5),
    ]
    assert main(["metrics", "--from-log", str(good), "--compare", str(tmp_path / "nope.log")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file or directory" in err
