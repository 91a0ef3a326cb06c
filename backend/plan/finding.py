"""One rule verdict: the rule engine's and preflight's unit of output.

Its own module (standard library only) so a finding read back from JSON, as the plan preview does
before pydantic is imported, is the same class the engine produces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backend.severity import Severity


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule verdict about one spec: what is wrong (with the numbers) and the nearest legal values."""

    rule: str
    severity: Severity  # error, warning or info
    fields: tuple[str, ...]
    message: str
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "fields": list(self.fields),
            "message": self.message,
            "fix": self.fix,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            str(data["rule"]),
            Severity(data["severity"]),
            tuple(str(f) for f in data["fields"]),
            str(data["message"]),
            str(data["fix"]),
        )


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)
