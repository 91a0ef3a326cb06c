"""`plan --deep` against the real megatron-core 0.19.2 / sglang 0.5.23 (oracle venv), and the differential
test: on seeded random layouts our rule engine and the real libraries agree on every verdict both decide."""

from __future__ import annotations

import json
import time

import pytest
from deep_layouts import FULL, N_LAYOUTS, SLICE, layouts

from backend.plan import checks as constraints
from backend.plan import deep
from backend.plan.spec import build_spec
from backend.severity import Severity


def report(preset: str, *sets: str) -> deep.DeepReport:
    return deep.run_deep_checks(build_spec(preset, list(sets)))


@pytest.mark.parametrize("preset", [FULL, SLICE])
def test_documented_layouts_pass_every_real_check(preset):
    result = report(preset)
    assert result.available and result.versions["megatron-core"] == "0.19.2"
    assert [c.name for c in result.checks if not c.ok] == []
    assert result.findings == [] and result.disagreements == []
    assert {c.name for c in result.checks} == {name for name, _ in deep.CHECKS}


@pytest.mark.parametrize(
    "sets, check, rule",
    [
        (["train.pp=5"], "select_pipeline_segment", "C2"),
        (["train.pp=5"], "initialize_model_parallel", "A1"),
        (["train.ep=64"], "initialize_model_parallel", "A2"),
        (
            ["train.ep=7", "train.pp=1", "train.tp=1", "cluster.nodes=7", "batch.global_batch_size=112"],
            "validate_args",
            "C4",
        ),
        (["model.num_query_groups=3"], "transformer_config", "B2"),
        (["train.vpp=2", "train.pp=1"], "initialize_model_parallel", "A8"),
        (["batch.global_batch_size=130"], "microbatches", "C8"),
        (["rollout.ep=24"], "server_args", "G6"),
        (["rollout.dp=3", "rollout.gpus_per_engine=32"], "server_args", "G1"),
    ],
)
def test_real_failures_map_to_our_rule_ids(sets, check, rule):
    result = report(FULL, *sets)
    run = next(c for c in result.checks if c.name == check)
    assert not run.ok and run.rule == rule, run
    ours = {f.rule for f in constraints.check(build_spec(FULL, sets)) if f.severity == "error"}
    assert deep.SAME_AS.get(rule, rule) in ours
    assert any(f.rule == deep.SAME_AS.get(rule, rule) and f.check == check for f in result.findings)


def test_a_disagreement_is_reported_as_such():
    """Feed the comparison an engine that wrongly calls PP5 fine: the real split refuses it."""
    spec = build_spec(FULL, ["train.pp=5"])
    result = deep.run_deep_checks(spec, ours=[])
    assert {(d.rule, d.check) for d in result.disagreements} >= {
        ("C2", "select_pipeline_segment"),
        ("A1", "initialize_model_parallel"),
    }
    wrongly_strict = [constraints.Finding("G6", Severity.ERROR, ("rollout.ep",), "made up", "none")]
    result = deep.run_deep_checks(build_spec(FULL), ours=wrongly_strict)
    assert [(d.rule, d.ours, d.theirs) for d in result.disagreements] == [("G6", "error", "ok")]


@pytest.mark.parametrize(
    "sets", [("train.vpp=1",), ("train.pp=1", "train.vpp=1", "train.tp=8", "train.ep=16")]
)
def test_a_virtual_pipeline_of_one_is_no_virtual_pipeline(sets):
    # miles' validate_args turns vpp=1 into None before any model-building check sees it
    result = deep.run_deep_checks(build_spec(FULL, list(sets)))
    assert [f.rule for f in result.findings if f.severity == "error"] == [] and result.disagreements == []


def test_unavailable_is_one_line(monkeypatch):
    monkeypatch.setattr(deep.importlib.util, "find_spec", lambda name: None)
    result = deep.run_deep_checks(build_spec(FULL))
    assert not result.available and result.lines() == [f"deep: {result.unavailable}"]
    assert "not importable" in result.unavailable and "\n" not in result.unavailable


# --------------------------------------------------------------------------- differential


def test_differential_engine_agrees_with_real_libraries():
    disagreements: list[str] = []
    decided = failed = agreed_failures = 0
    start = time.perf_counter()
    for preset, sets in layouts():
        spec = build_spec(preset, sets)
        result = deep.run_deep_checks(spec)
        decided += sum(len(c.decides) if c.ok else 1 for c in result.checks)
        failed += sum(not c.ok for c in result.checks)
        ours = {f.rule for f in constraints.check(spec) if f.severity == "error"}
        agreed_failures += sum(not c.ok and deep.SAME_AS.get(c.rule, c.rule) in ours for c in result.checks)
        disagreements += [
            f"{preset} {' '.join(sets)}: {d.rule} ours={d.ours} {d.check}={d.theirs} ({d.detail})"
            for d in result.disagreements
        ]
    seconds = time.perf_counter() - start
    assert failed > N_LAYOUTS // 4, "the random layouts must exercise failures, not only legal layouts"
    assert agreed_failures > N_LAYOUTS // 4, "both sides must reject many layouts for the same rule"
    assert decided > N_LAYOUTS * 5
    assert not disagreements, f"{len(disagreements)} disagreements in {seconds:.0f}s:\n" + "\n".join(
        disagreements[:40]
    )


def test_a_check_missing_from_the_installed_version_is_skipped(monkeypatch):
    """miles' image runs the radixark Megatron fork (core 0.16), which has no select_pipeline_segment."""

    def old_core(spec):
        raise ImportError("cannot import name 'select_pipeline_segment'")

    monkeypatch.setattr(
        deep, "CHECKS", (*deep.CHECKS[:-2], ("select_pipeline_segment", old_core), deep.CHECKS[-1])
    )
    result = deep.run_deep_checks(build_spec(FULL, ["train.pp=5"]))
    run = next(c for c in result.checks if c.name == "select_pipeline_segment")
    assert run.ok and run.skipped and run.decides == ()
    assert "skipped (not in the installed version" in "\n".join(result.lines())
    assert not any(d.check == "select_pipeline_segment" for d in result.disagreements)


def test_plan_deep_cli(capsys):
    """`ultra-console plan --deep --json` with the libraries present: their verdicts join the plan."""
    from console.cli import main

    assert main(["plan", "--deep", "--json"]) == 0
    good = json.loads(capsys.readouterr().out)
    assert good["deep"]["available"] is True and good["deep"]["ok"] is True and good["ok"] is True
    assert main(["plan", "--deep", "--json", "--set", "train.pp=5"]) == 2
    bad = json.loads(capsys.readouterr().out)["deep"]
    assert {(f["rule"], f["check"]) for f in bad["findings"]} >= {
        ("C2", "select_pipeline_segment"),
        ("A1", "initialize_model_parallel"),
    }
    assert bad["disagreements"] == []
