"""One evaluation of a layout, as the plan view and `ultra-console plan` show it: the spec (or why not),
the findings worst first, the derived numbers, the submission with its copyable command, and a one-line
summary. The one place a plan is evaluated: the view (edits applied per keystroke) and the CLI (a built
spec) both come here.

It round-trips through JSON, so the first frame's copy can be computed in another process while the
console imports Textual (backend/plan/preview_process.py). The pydantic-backed modules are imported inside
`evaluate_spec` and `evaluate`: reading an evaluation back costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backend.errors import ConsoleError
from backend.plan.derived import LayoutFigures
from backend.plan.finding import Finding

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec
    from backend.plan.submission import Submission


@dataclass
class PlanEvaluation:
    spec: RunSpec | None = None  # None when invalid, or for an evaluation read back from JSON
    valid: bool = False  # a spec was built (true for a read-back copy of a valid one too)
    field_errors: dict[str, str] = field(default_factory=dict)  # path -> why its text is refused
    error: str | None = None  # a problem no single field owns
    findings: list[Finding] = field(default_factory=list)  # worst first, as check() orders them
    derived: LayoutFigures | None = None  # None while there is no valid spec
    command: str = ""  # the copyable `ray job submit` line, secrets redacted ("" while invalid)
    summary: str = "no valid spec"
    # Not carried through JSON, like the spec: what was built, or why it could not be.
    submission: Submission | None = None
    submission_error: ConsoleError | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "field_errors": self.field_errors,
            "error": self.error,
            "findings": [f.to_json() for f in self.findings],
            "derived": None if self.derived is None else self.derived.to_json(),
            "command": self.command,
            "summary": self.summary,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanEvaluation:
        derived = data["derived"]
        return cls(
            None,
            bool(data["valid"]),
            {str(k): str(v) for k, v in data["field_errors"].items()},
            data["error"],
            [Finding.from_json(f) for f in data["findings"]],
            None if derived is None else LayoutFigures.from_json(derived),
            str(data["command"]),
            str(data["summary"]),
        )


def summary_of(spec: RunSpec) -> str:
    t, r, c = spec.train, spec.rollout, spec.cluster
    return (
        f"{spec.model.name} · {c.nodes}×{c.gpus_per_node} = {c.total_gpus} GPUs · "
        f"TP{t.tp} PP{t.pp} CP{t.cp} EP{t.ep} · engine {r.gpus_per_engine} GPUs EP{r.ep} DP{r.dp} · "
        f"mode {spec.run.mode}"
    )


def evaluate_spec(
    spec: RunSpec, *, run_id: str | None, address: str | None = None, secrets: Mapping[str, str] | None = None
) -> PlanEvaluation:
    """A built spec checked, derived and turned into its submission. Never raises for a submission that
    cannot be built: `command` says why and `submission_error` holds the error."""
    from backend.plan.checks import check  # lazy: not on the first frame (console_frame.py)
    from backend.plan.derived import layout_figures
    from backend.plan.submission import build_submission

    out = PlanEvaluation(
        spec, True, findings=check(spec), derived=layout_figures(spec), summary=summary_of(spec)
    )
    try:
        out.submission = build_submission(spec, run_id=run_id, secrets=secrets)
    except ConsoleError as err:
        out.command, out.submission_error = f"(no command: {err})", err
    else:
        out.command = out.submission.shell(address)
    return out


def evaluate(
    base: dict[str, Any], edits: Mapping[str, str], *, run_id: str | None, address: str
) -> PlanEvaluation:
    """`base` (a preset dict) with `edits` (dotted path -> text as typed) applied, checked and built.
    Never raises for bad input: bad values come back per field."""
    from backend.plan.spec_edit import edit_spec  # lazy: not on the first frame (console_frame.py)

    result = edit_spec(base, dict(edits))
    if result.spec is None:
        return PlanEvaluation(None, False, dict(result.field_errors), result.error)
    out = evaluate_spec(result.spec, run_id=run_id, address=address)
    out.field_errors, out.error = dict(result.field_errors), result.error
    return out
