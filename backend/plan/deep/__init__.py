"""`plan --deep`: run the real Megatron and SGLang checks on a spec and compare with our rule engine.

Our engine (backend.plan.checks) re-derives every rule arithmetically; this package asks the libraries
themselves where they are importable (miles' image on the head, or the CPU oracle venv the tests build).
`library_checks` holds the checks, `rule_map` the table from a library's error text to a catalog rule id
(data), `patches` the process-local state they run under (all of it restored afterwards), `report` the
result types. A rule whose verdict differs between the library and our engine is a disagreement.

Nothing here is imported unless `--deep` is asked for (or the demo writes a model config).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from backend.plan.catalog import RULES
from backend.plan.checks import check
from backend.plan.deep.library_checks import CHECKS, hf_config, megatron_argv
from backend.plan.deep.report import CheckRun, DeepFinding, DeepReport, Disagreement
from backend.plan.deep.rule_map import ERROR_RULES, FIX, SAME_AS, decides, effective_vpp, error_text, rule_for
from backend.plan.finding import Finding
from backend.plan.spec import RunSpec
from backend.severity import Severity
from shim.check import quiet

__all__ = [
    "CHECKS",
    "ERROR_RULES",
    "FIX",
    "SAME_AS",
    "CheckRun",
    "DeepFinding",
    "DeepReport",
    "Disagreement",
    "compare",
    "decides",
    "effective_vpp",
    "hf_config",
    "megatron_argv",
    "rule_for",
    "run_deep_checks",
    "run_one",
    "unavailable_reason",
]

REQUIRED_MODULES = ("megatron.core", "megatron.training", "sglang")


def unavailable_reason() -> str | None:
    """None when the libraries import; else the one line `plan --deep` prints."""
    missing = []
    for name in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        return (
            f"real-library checks skipped: {', '.join(missing)} not importable here "
            "(they are in miles' image; tests build them with tests/deep/build_env.sh)"
        )
    return None


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("megatron-core", "megatron-bridge", "sglang", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def _fields_of(rule: str) -> tuple[str, ...]:
    found = RULES.get(SAME_AS.get(rule, rule))
    return found.fields if found else ()


def run_one(name: str, fn: Callable[[RunSpec], None], spec: RunSpec) -> CheckRun:
    """One check, timed; the library's failure becomes its verdict, never an exception."""
    start = time.perf_counter()
    try:
        with quiet():
            fn(spec)
    except ImportError as err:  # e.g. select_pipeline_segment is new in core 0.17; the fork has none
        return CheckRun(
            name,
            (),
            True,
            seconds=time.perf_counter() - start,
            skipped=f"not in the installed version: {err}",
        )
    except Exception as err:  # the library's verdict: map it, never let it escape
        text = error_text(err)
        return CheckRun(
            name, decides(name, spec), False, rule_for(name, text), text, time.perf_counter() - start
        )
    except SystemExit as err:  # argparse inside parse_args exits on an argv it cannot read
        text = f"SystemExit({err.code}) from the argument parser"
        return CheckRun(name, decides(name, spec), False, None, text, time.perf_counter() - start)
    return CheckRun(name, decides(name, spec), True, seconds=time.perf_counter() - start)


def _our_errors(findings: Sequence[Finding]) -> set[str]:
    return {f.rule for f in findings if f.severity == "error"}


def compare(checks: list[CheckRun], ours: Sequence[Finding]) -> list[Disagreement]:
    """Rules both sides decide, with different verdicts."""
    errors = _our_errors(ours)
    out: list[Disagreement] = []
    seen: set[tuple[str, str]] = set()
    for run in checks:
        if run.ok:
            for rule in run.decides:
                if rule in errors and (rule, run.name) not in seen:
                    seen.add((rule, run.name))
                    out.append(Disagreement(rule, "error", "ok", run.name, f"{run.name} accepts this layout"))
            continue
        if run.rule is None:
            out.append(
                Disagreement(
                    "?", "ok" if not errors else "error", "error", run.name, f"unmapped failure: {run.error}"
                )
            )
            continue
        ours_id = SAME_AS.get(run.rule, run.rule)
        if ours_id not in errors:
            out.append(Disagreement(ours_id, "ok", "error", run.name, run.error or ""))
    return out


def run_deep_checks(spec: RunSpec, *, ours: Sequence[Finding] | None = None) -> DeepReport:
    """Run every real-library check on `spec`; `ours` defaults to backend.plan.checks.check(spec)."""
    reason = unavailable_reason()
    if reason:
        return DeepReport(available=False, unavailable=reason)
    if ours is None:
        ours = check(spec)
    runs = [run_one(name, fn, spec) for name, fn in CHECKS]
    findings = [
        DeepFinding(
            SAME_AS.get(r.rule, r.rule) if r.rule else "?",
            Severity.ERROR,
            _fields_of(r.rule) if r.rule else (),
            f"{r.name}: {r.error}",
            FIX.get(SAME_AS.get(r.rule, r.rule) if r.rule else "", "see the library's message"),
            r.name,
        )
        for r in runs
        if not r.ok
    ]
    return DeepReport(
        available=True,
        findings=findings,
        checks=runs,
        disagreements=compare(runs, ours),
        versions=_versions(),
    )
