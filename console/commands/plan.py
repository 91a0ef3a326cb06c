"""`ultra-console plan`: check a layout and show the exact job, without touching the cluster.

Exit status: 0 no error finding, 2 at least one error finding, 1 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.plan.deep import DeepReport
    from backend.plan.evaluation import PlanEvaluation
    from backend.plan.spec import RunSpec

EXIT_FINDINGS = 2


def add_spec_args(parser: argparse.ArgumentParser) -> None:
    """--preset and --set, shared by every command that builds a spec."""
    parser.add_argument(
        "--preset",
        default=None,
        metavar="NAME|PATH",
        help="preset name (file stem in configs/) or path to a TOML file; default: the full model",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value by dotted path, e.g. train.tp=4 (repeatable)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="check a layout against every rule and show the exact submission")
    add_spec_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also run megatron-core / sglang's own checks where they are importable",
    )
    p.set_defaults(func=run)


def evaluate(spec: RunSpec) -> PlanEvaluation:
    """The plan of `spec` as `plan` shows it (secrets from
    the environment; raises when no job can be built)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.plan.evaluation import evaluate_spec
    from backend.plan.submission import secrets_from_env

    evaluation = evaluate_spec(spec, run_id=None, secrets=secrets_from_env(os.environ))
    if evaluation.submission_error is not None:
        raise evaluation.submission_error
    return evaluation


def is_ok(evaluation: PlanEvaluation, deep: DeepReport | None) -> bool:
    """No error finding, from our rules or from the real libraries."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.plan.finding import has_errors

    deep_errors = deep is not None and any(f.severity == "error" for f in deep.findings)
    return not has_errors(evaluation.findings) and not deep_errors


def plan_payload(evaluation: PlanEvaluation, deep: DeepReport | None = None) -> dict[str, Any]:
    """The JSON contract of `plan --json`."""
    submission, derived = evaluation.submission, evaluation.derived
    assert submission is not None and derived is not None  # evaluate() raised otherwise
    payload: dict[str, Any] = {
        "ok": is_ok(evaluation, deep),
        "findings": [f.to_json() for f in evaluation.findings],
        "derived": derived.to_json(),
        "submission": submission.redacted_payload() | {"argv": submission.argv, "shell": submission.shell()},
    }
    if deep is not None:
        payload["deep"] = deep.to_json()
    return payload


def _fmt_value(value: object) -> str:
    """One figure of the derived JSON (a number, a list of them, or a stage's table) on one line."""
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, list):
        return "; ".join(_fmt_value(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={_fmt_value(v)}" for k, v in value.items())
    return str(value)


def _finding_lines(evaluation: PlanEvaluation) -> list[str]:
    """Each finding with its fix, or the line that says every rule passes."""
    if not evaluation.findings:
        return ["findings none: every rule passes"]
    lines = []
    for f in evaluation.findings:
        lines.append(f"{f.severity.upper():8} {f.rule:4} [{', '.join(f.fields)}] {f.message}")
        if f.fix:
            lines.append(f"{'':14}fix: {f.fix}")
    return lines


def _deep_lines(deep: DeepReport) -> list[str]:
    """The real libraries' verdict: why it is unavailable, its findings, where it disagrees with ours."""
    lines = [""]
    if not deep.available:
        lines.append(f"deep     {deep.unavailable}")
    lines += [f"DEEP {d.severity.upper():8} {d.rule:4} {d.message}" for d in deep.findings]
    return lines + [f"DISAGREE {disagreement.to_json()}" for disagreement in deep.disagreements]


def render_text(spec: RunSpec, evaluation: PlanEvaluation, deep: DeepReport | None = None) -> str:
    t, r, c = spec.train, spec.rollout, spec.cluster
    lines = [
        f"preset   {spec.preset}: {spec.model.name}",
        f"cluster  {c.nodes} node(s) x {c.gpus_per_node} GPUs = {c.total_gpus} GPUs",
        f"train    TP{t.tp} PP{t.pp} CP{t.cp} EP{t.ep} ETP{t.etp if t.etp is not None else '(unset)'}"
        f" SP {'on' if spec.sequence_parallel else 'off'}",
        f"rollout  engines of {r.gpus_per_engine} GPUs, ep {r.ep}, dp {r.dp}"
        f"{' (dp-attention)' if r.enable_dp_attention else ''}, mem {r.mem_fraction}",
        f"mode     {spec.run.mode}",
        "",
    ]
    lines += _finding_lines(evaluation)
    if deep is not None:
        lines += _deep_lines(deep)
    submission, derived = evaluation.submission, evaluation.derived
    assert submission is not None and derived is not None  # evaluate() raised otherwise
    lines += ["", "derived"]
    for key, value in derived.to_json().items():
        lines.append(f"  {key:34} {_fmt_value(value)}")
    lines += ["", f"submission id  {submission.submission_id}", "command", "  " + submission.shell()]
    from backend.plan.miles_flags import checked_against  # lazy, like every import of this command

    lines.append(f"checked against {checked_against()}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.plan.spec import build_spec

    spec = build_spec(args.preset, args.overrides)
    evaluation = evaluate(spec)
    deep = None
    if args.deep:
        from backend.plan.deep import run_deep_checks

        deep = run_deep_checks(spec, ours=evaluation.findings)
    if args.json:
        json.dump(plan_payload(evaluation, deep), sys.stdout, indent=None, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        print(render_text(spec, evaluation, deep))
    return 0 if is_ok(evaluation, deep) else EXIT_FINDINGS
