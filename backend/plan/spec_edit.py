"""Field-by-field editing of a spec: what the plan form calls on every keystroke.

The form holds raw text per dotted path. `edit_spec` applies it to a preset dict through the recipe's
own override parser and validator, and reports each bad value *against its field* (so the UI can
show it inline and keep the text). The spec returned is built without the bad edits, so rules and
the command preview stay live for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from backend.errors import SpecError
from backend.plan.spec import RunSpec, apply_overrides, spec_from_dict


@dataclass
class EditResult:
    spec: RunSpec | None
    field_errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # a problem no single edited field owns

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.field_errors and self.error is None


def _loc_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _owner(path: str, edited: set[str]) -> str | None:
    """The edited field an error location belongs to (exact, or a parent/child path)."""
    for key in edited:
        if path == key or path.startswith(key + ".") or key.startswith(path + "."):
            return key
    return None


def edit_spec(base: dict[str, Any], edits: dict[str, str]) -> EditResult:
    """Apply `edits` (dotted path -> text as typed) to `base`; never raises for bad input."""
    errors: dict[str, str] = {}
    good: dict[str, str] = {}
    for key, text in edits.items():
        problem = _edit_problem(key, text)
        if problem is None:
            good[key] = text
        else:
            errors[key] = problem
    for _ in range(len(good) + 1):
        data = apply_overrides(base, [f"{k}={v}" for k, v in good.items()])
        try:
            return EditResult(RunSpec.model_validate(data), errors)
        except ValidationError as err:
            if _blame(err, good, errors):
                continue
            try:
                spec_from_dict(data)
            except SpecError as whole:
                return EditResult(None, errors, str(whole))
    return EditResult(None, errors, "the edited values do not form a valid spec")


def _edit_problem(key: str, text: str) -> str | None:
    """Why one edit cannot apply on its own (an unknown key, a value that does not parse, none typed)."""
    try:
        apply_overrides({}, [f"{key}={text}"])
    except SpecError as err:
        return str(err)
    return None if text.strip() else "enter a value"


def _blame(err: ValidationError, good: dict[str, str], errors: dict[str, str]) -> bool:
    """Move each edit the validation errors point at from `good` to `errors`; False when none is to blame."""
    blamed = False
    for item in err.errors():
        owner = _owner(_loc_path(item["loc"]), set(good))
        if owner is not None:
            errors[owner] = item["msg"]
            good.pop(owner, None)
            blamed = True
    return blamed
