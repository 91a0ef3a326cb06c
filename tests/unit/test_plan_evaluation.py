"""The one plan evaluation (view and CLI): what it holds for a good, a broken and an unbuildable spec, its
JSON round trip (the first frame's copy), and the run modes and form texts backend gives the plan form."""

from __future__ import annotations

import json
from typing import get_args

from backend.errors import SpecError
from backend.plan.checks import check
from backend.plan.derived import layout_figures
from backend.plan.evaluation import PlanEvaluation, evaluate, evaluate_spec
from backend.plan.run_modes import RUN_MODES
from backend.plan.spec import RunOptions, build_spec, load_preset_dict
from backend.plan.view_start import field_text
from console.widgets.layout_form import FIELDS

FULL = "nemotron-3-ultra-550b-a55b"


def _round_trip(ev: PlanEvaluation) -> PlanEvaluation:
    return PlanEvaluation.from_json(json.loads(json.dumps(ev.to_json())))


def test_a_spec_is_evaluated_once_with_findings_derived_numbers_and_command() -> None:
    spec = build_spec(FULL, ["train.tp=16"])
    ev = evaluate_spec(spec, run_id="260101-120000-000", address="http://127.0.0.1:8265")
    assert ev.valid and ev.spec is spec
    assert ev.findings == check(spec) and any(f.rule == "D2" for f in ev.findings)
    assert (
        ev.derived == layout_figures(spec)
        and ev.derived is not None
        and ev.derived.training.world_size == 128
    )
    assert ev.submission is not None and ev.submission_error is None
    assert ev.command == ev.submission.shell("http://127.0.0.1:8265")
    assert "ultra-console-260101-120000-000" in ev.command and "TP16" in ev.summary


def test_read_back_copy_equals_the_evaluation_but_holds_no_objects() -> None:
    ev = evaluate(
        load_preset_dict(FULL), {"train.pp": "2", "rollout.dp": "x"}, run_id="r", address="http://h:1"
    )
    back = _round_trip(ev)
    assert (
        back.valid,
        back.field_errors,
        back.error,
        back.findings,
        back.derived,
        back.command,
        back.summary,
    ) == (ev.valid, ev.field_errors, ev.error, ev.findings, ev.derived, ev.command, ev.summary)
    assert "rollout.dp" in back.field_errors and back.derived is not None and back.derived.training.dp == 8
    assert back.spec is None and back.submission is None


def test_an_invalid_spec_has_no_derived_numbers_and_reads_back_so() -> None:
    ev = evaluate({}, {}, run_id=None, address="")
    assert not ev.valid and ev.error == "spec: missing key 'model'"
    assert ev.derived is None and ev.command == "" and ev.findings == []
    assert _round_trip(ev).derived is None


def test_a_submission_that_cannot_be_built_is_said_in_the_command_not_raised() -> None:
    spec = build_spec(FULL, ["run.extra_args=--a 'open"])
    ev = evaluate_spec(spec, run_id="r")
    assert ev.submission is None and isinstance(ev.submission_error, SpecError)
    assert ev.command.startswith("(no command: run.extra_args cannot be split")
    assert ev.derived is not None and ev.findings == check(spec)  # the rest of the plan still stands


def test_run_modes_are_the_spec_field_type_and_the_form_cycles_them() -> None:
    assert RUN_MODES == get_args(RunOptions.model_fields["mode"].annotation) == ("normal", "debug_minimal")
    assert next(f for f in FIELDS if f.path == "run.mode").choices == RUN_MODES


def test_field_text_is_what_the_form_shows_for_a_preset_value() -> None:
    base = {"train": {"tp": 8, "etp": None, "sequence_parallel": True}, "rollout": {"mem_fraction": 0.7}}
    assert [
        field_text(base, p)
        for p in (
            "train.tp",
            "train.etp",
            "train.sequence_parallel",
            "rollout.mem_fraction",
            "train.missing",
            "nope.deeper",
        )
    ] == ["8", "none", "true", "0.7", "none", "none"]
