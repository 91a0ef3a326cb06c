"""What `plan --deep` reports: the real-library checks it ran, their failures as findings, and where
they disagree with our rule engine. Standard library only, and JSON-able for `plan --deep --json`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.severity import Severity


@dataclass(frozen=True)
class DeepFinding:
    """A failure of a real library check, in the shape of our `Finding` plus the check that failed."""

    rule: str
    severity: Severity
    fields: tuple[str, ...]
    message: str
    fix: str
    check: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "fields": list(self.fields),
            "message": self.message,
            "fix": self.fix,
            "check": self.check,
        }


@dataclass(frozen=True)
class CheckRun:
    """One real-library check: which rules its pass decides, and how it ended."""

    name: str
    decides: tuple[str, ...]
    ok: bool
    rule: str | None = None
    error: str | None = None
    seconds: float = 0.0
    skipped: str | None = None  # the installed library version lacks this entry point

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "decides": list(self.decides),
            "ok": self.ok,
            "rule": self.rule,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class Disagreement:
    """A rule both sides decide, with different verdicts."""

    rule: str
    ours: str  # "error" or "ok"
    theirs: str
    check: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "ours": self.ours,
            "theirs": self.theirs,
            "check": self.check,
            "detail": self.detail,
        }


@dataclass
class DeepReport:
    """Everything `plan --deep` found: each check's run, the failures as findings, the disagreements."""

    available: bool
    unavailable: str | None = None
    findings: list[DeepFinding] = field(default_factory=list)
    checks: list[CheckRun] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.available and not self.findings and not self.disagreements

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "unavailable": self.unavailable,
            "message": self.unavailable,
            "ok": self.ok,
            "versions": self.versions,
            "findings": [f.to_json() for f in self.findings],
            "checks": [c.to_json() for c in self.checks],
            "disagreements": [d.to_json() for d in self.disagreements],
        }

    def lines(self) -> list[str]:
        """Plain one-line-per-item text for the CLI."""
        if not self.available:
            return [f"deep: {self.unavailable}"]
        out = [
            f"deep: {c.name}: "
            + (
                f"skipped ({c.skipped})"
                if c.skipped
                else "ok"
                if c.ok
                else f"FAILED [{c.rule or '?'}] {c.error}"
            )
            for c in self.checks
        ]
        out += [
            f"deep: DISAGREEMENT on {d.rule}: ours {d.ours}, {d.check} {d.theirs} ({d.detail})"
            for d in self.disagreements
        ]
        return out
