"""One evaluation of a layout, as the plan view shows it: the spec (or why not), the findings worst
first, the derived numbers, the exact command and a one-line summary.

It round-trips through JSON, so the first frame's copy can be computed in another process while the
console imports Textual (backend/plan/preview_process.py). The pydantic-backed modules are imported inside
`evaluate`: reading an evaluation back costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backend.errors import ConsoleError
from backend.plan.finding import Finding


@dataclass
class PlanEvaluation:
    spec: Any = None  # the RunSpec; None when invalid, or for an evaluation read back from JSON
    valid: bool = False  # a spec was built (true for a read-back copy of a valid one too)
    field_errors: dict[str, str] = field(default_factory=dict)  # path -> why its text is refused
    error: str | None = None  # a problem no single field owns
    findings: list[Finding] = field(default_factory=list)  # worst first, as check() orders them
    derived: dict[str, Any] = field(default_factory=dict)
    command: str = ""  # the copyable `ray job submit` line, secrets redacted ("" while invalid)
    summary: str = "no valid spec"

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "field_errors": self.field_errors, "error": self.error,
                "findings": [f.to_json() for f in self.findings], "derived": self.derived,
                "command": self.command, "summary": self.summary}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanEvaluation:
        return cls(None, bool(data["valid"]), {str(k): str(v) for k, v in data["field_errors"].items()},
                   data["error"], [Finding.from_json(f) for f in data["findings"]], dict(data["derived"]),
                   str(data["command"]), str(data["summary"]))


def summary_of(spec: Any) -> str:
    t, r, c = spec.train, spec.rollout, spec.cluster
    return (f"{spec.model.name} · {c.nodes}×{c.gpus_per_node} = {c.total_gpus} GPUs · "
            f"TP{t.tp} PP{t.pp} CP{t.cp} EP{t.ep} · engine {r.gpus_per_engine} GPUs EP{r.ep} DP{r.dp} · "
            f"mode {spec.run.mode}")


def evaluate(base: dict[str, Any], edits: Mapping[str, str], *, run_id: str | None, address: str) -> PlanEvaluation:
    """`base` (a preset dict) with `edits` (dotted path -> text as typed) applied, checked and built.
    Never raises for bad input: bad values come back per field."""
    from backend.plan.checks import check, derive
    from backend.plan.spec_edit import edit_spec
    from backend.plan.submission import build_submission

    result = edit_spec(base, dict(edits))
    out = PlanEvaluation(result.spec, result.spec is not None, dict(result.field_errors), result.error)
    spec = result.spec
    if spec is None:
        return out
    out.findings = check(spec)
    out.derived = dict(derive(spec))
    out.summary = summary_of(spec)
    try:
        out.command = build_submission(spec, run_id=run_id).shell(address)
    except ConsoleError as err:
        out.command = f"(no command: {err})"
    return out
