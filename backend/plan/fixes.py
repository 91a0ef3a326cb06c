"""From a diagnosis to plan edits: each failure kind's fix as field changes (`configs/fixes.toml`), a diff the
operator accepts or drops field by field, and the RESTART / CHANGE / STOP advice with its reason.

Why data: the catalog's "what to try" was prose the operator retyped as `--set` pairs; here the same advice is
an edit the plan applies, and the edited spec goes through every rule like any other (a fix never skips one).
Pure: a kind id and a role in (the signals room names them), a spec in, edits and findings out.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.plan import checks
from backend.plan.finding import Finding
from backend.plan.spec import SETTABLE_KEYS, RunSpec
from backend.plan.spec_edit import EditResult, edit_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

How = Literal["set", "scale", "add"]
Action = Literal["restart", "change", "stop"]
HOWS: tuple[How, ...] = ("set", "scale", "add")
ACTIONS: tuple[Action, ...] = ("restart", "change", "stop")
DEFAULT = "default"


class FixCatalogError(ConsoleError):
    """configs/fixes.toml is malformed."""


@dataclass(frozen=True, slots=True)
class FixRule:
    """One proposed edit for a failure kind (a `[[fix]]` table)."""

    kind: str
    role: str
    field: str
    how: How
    value: Any
    why: str
    accept: bool = True
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True, slots=True)
class AdviceRule:
    """What to do after a failure kind (an `[[advice]]` table)."""

    kind: str
    action: Action
    reason: str
    repeated: Action | None = None
    rollback: int = 0
    check: str | None = None


@dataclass(frozen=True, slots=True)
class FixBook:
    fixes: tuple[FixRule, ...]
    advice: tuple[AdviceRule, ...]

    def fixes_for(self, kind: str, role: str | None) -> tuple[FixRule, ...]:
        """The role's own edits for `kind`, else its default ones."""
        mine = [f for f in self.fixes if f.kind == kind]
        by_role = [f for f in mine if f.role == (role or "")]
        return tuple(by_role or [f for f in mine if f.role == DEFAULT])

    def advice_for(self, kind: str) -> AdviceRule:
        found = next((a for a in self.advice if a.kind == kind), None)
        if found is None:
            found = next((a for a in self.advice if a.kind == DEFAULT), None)
        return found or AdviceRule(DEFAULT, "stop", "no advice for this failure: read the cause first")


def default_fixes_path() -> Path:
    return Path(str(resources.files("configs").joinpath("fixes.toml")))


def _bound(raw: Fields, name: str, where: str) -> float | None:
    value = raw.value(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FixCatalogError(f"{where}: {name} must be a number")
    return float(value)


def _fix(raw: Fields, where: str) -> FixRule:
    for name in ("kind", "role", "field", "why"):
        if not raw.string(name):
            raise FixCatalogError(f"{where}: needs a {name}")
    how, field = raw.text("how"), raw.text("field")
    if how not in HOWS:
        raise FixCatalogError(f"{where}: how must be one of {', '.join(HOWS)}")
    if field not in SETTABLE_KEYS:
        raise FixCatalogError(f"{where}: {field!r} is no plan field")
    value = raw.value("value")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if value is None or (how != "set" and not numeric):
        raise FixCatalogError(f"{where}: needs a value ({how} takes a number)")
    return FixRule(
        raw.text("kind"),
        raw.text("role"),
        field,
        how,  # checked against HOWS above
        value,
        raw.text("why"),
        raw.value("accept") is not False,
        _bound(raw, "min", where),
        _bound(raw, "max", where),
    )


def _action(raw: Fields, name: str, where: str) -> Action | None:
    value = raw.value(name)
    if value is None and name == "repeated":
        return None
    if value not in ACTIONS:
        raise FixCatalogError(f"{where}: {name} must be one of {', '.join(ACTIONS)}")
    return value  # one of ACTIONS


def _advice(raw: Fields, where: str) -> AdviceRule:
    if not raw.string("kind") or not raw.string("reason"):
        raise FixCatalogError(f"{where}: needs a kind and a reason")
    action = _action(raw, "action", where)
    assert action is not None
    return AdviceRule(
        raw.text("kind"),
        action,
        raw.text("reason"),
        _action(raw, "repeated", where),
        max(0, raw.integer("rollback")),
        raw.optional_text("check"),
    )


def load_fixes(path: str | Path | None = None, known_kinds: Collection[str] | None = None) -> FixBook:
    """Parse and check the fix data; `known_kinds` (the failure catalog's ids) catches a misspelt kind."""
    path = Path(path) if path is not None else default_fixes_path()
    try:
        data = Fields(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise FixCatalogError(f"cannot read the fixes {path}: {err}") from None
    fixes = tuple(_fix(Fields.of(t), f"fix #{i + 1} in {path.name}") for i, t in enumerate(data.items("fix")))
    advice = tuple(
        _advice(Fields.of(t), f"advice #{i + 1} in {path.name}") for i, t in enumerate(data.items("advice"))
    )
    if known_kinds is not None:
        known = {*known_kinds, DEFAULT}
        named = {f.kind for f in fixes} | {a.kind for a in advice}
        unknown = sorted(named - known)
        if unknown:
            raise FixCatalogError(f"{path.name} names unknown failure kinds: {', '.join(unknown)}")
    return FixBook(fixes, advice)


# --------------------------------------------------------------------------- the diff


@dataclass(frozen=True, slots=True)
class FieldEdit:
    """One field the fix changes: its value before and after (as `--set` text), and why."""

    field: str
    before: str
    after: str
    why: str
    accepted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "before": self.before,
            "after": self.after,
            "why": self.why,
            "accepted": self.accepted,
        }


def field_value(spec: RunSpec, path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        node = getattr(node, part)
    return node


def as_text(value: Any) -> str:
    """A value as `--set` parses it back (TOML scalar syntax; a string quoted)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _moved(rule: FixRule, before: Any) -> Any:
    """The value after `rule`, within its bounds; the value before when the rule cannot move it."""
    if rule.how == "set":
        return rule.value
    number = _number(before)
    if number is None:
        return before
    after = number * float(rule.value) if rule.how == "scale" else number + float(rule.value)
    if rule.low is not None:
        after = max(after, rule.low)
    if rule.high is not None:
        after = min(after, rule.high)
    if isinstance(before, int):
        return max(1, round(after))
    if isinstance(before, str):  # a number kept as the text miles receives (lr "1e-6")
        return f"{after:.6g}"
    return round(after, 6)


def propose(book: FixBook, kind: str, role: str | None, spec: RunSpec) -> tuple[FieldEdit, ...]:
    """The kind's edits on `spec`, leaving out those that would change nothing (already full recompute, a
    bound reached)."""
    out: list[FieldEdit] = []
    for rule in book.fixes_for(kind, role):
        before = field_value(spec, rule.field)
        after = _moved(rule, before)
        same_number = _number(before) is not None and _number(after) == _number(before)
        if as_text(after) == as_text(before) or same_number:
            continue
        out.append(FieldEdit(rule.field, as_text(before), as_text(after), rule.why, rule.accept))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class FixedPlan:
    """The spec with the accepted edits, every rule's findings on it, and the edits a value refused."""

    spec: RunSpec | None
    findings: tuple[Finding, ...]
    field_errors: dict[str, str]
    error: str | None = None

    @property
    def launchable(self) -> bool:
        return self.spec is not None and not self.field_errors and not checks.has_errors(list(self.findings))


def apply_edits(
    spec: RunSpec, edits: Iterable[FieldEdit], accepted: Collection[str] | None = None
) -> FixedPlan:
    """`spec` with the edits the operator accepted (`accepted`: field names; None: each edit's own default),
    then every rule on the result."""
    chosen = {e.field: e.after for e in edits if (e.accepted if accepted is None else e.field in accepted)}
    result: EditResult = edit_spec(spec.model_dump(mode="json"), chosen)
    found = tuple(checks.check(result.spec)) if result.spec is not None else ()
    return FixedPlan(result.spec, found, dict(result.field_errors), result.error)


# --------------------------------------------------------------------------- the advice


@dataclass(frozen=True, slots=True)
class Advice:
    """RESTART, CHANGE or STOP, why, and what the restart needs (checkpoints to roll back, a check)."""

    action: Action
    reason: str
    rollback: int = 0
    check: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.upper(),
            "reason": self.reason,
            "rollback": self.rollback,
            "check": self.check,
        }


def advise(book: FixBook, kind: str, earlier: Iterable[str], edits: Collection[FieldEdit]) -> Advice:
    """The advice for a run that died of `kind`, the chain's earlier attempts having died of `earlier`
    (oldest first): a repeat of the same kind may turn it (a second divergence: stop), and CHANGE with no edit
    left to make is STOP."""
    rule = book.advice_for(kind)
    before = list(earlier)
    if rule.repeated is not None and before and before[-1] == kind:
        reason = f"the previous attempt died of the same failure ({kind}): {rule.reason}"
        return Advice(rule.repeated, reason, rule.rollback, rule.check)
    if rule.action == "change" and not edits:
        reason = f"{rule.reason}; but no edit is left to propose (every field is at its bound)"
        return Advice("stop", reason, rule.rollback, rule.check)
    return Advice(rule.action, rule.reason, rule.rollback, rule.check)


_DEFAULT: FixBook | None = None


def default_fixes() -> FixBook:
    """The shipped fix data, read once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_fixes()
    return _DEFAULT
