"""One severity scale for everything the console judges: plan findings, run alerts and the notices it shows.

Its own module (standard library only, below every room) so plan and signals, which must not meet, and the
console's first frame all read the same enum. A finding says `error` for a layout the stack refuses; an alert
says `critical` for a run that is failing; both rank above `warning`, which ranks above `info`.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

NoticeLevel = Literal["information", "warning", "error"]  # Textual's toast levels (the console's notify)


class Severity(str, Enum):
    """Worst first. A `str` so JSON, TOML and the words on screen stay the value (`"warning"`)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def rank(self) -> int:
        """0 for the worst; sorts findings and alerts worst first."""
        return _RANK[self]

    @property
    def urgent(self) -> bool:
        """Critical or error: the state line marks it, the plan refuses to launch on it."""
        return self in (Severity.CRITICAL, Severity.ERROR)

    @property
    def notice_level(self) -> NoticeLevel:
        """The toast level a notice of this severity is shown at."""
        return "error" if self.urgent else "warning" if self is Severity.WARNING else "information"

    @classmethod
    def parse(cls, word: object) -> Severity | None:
        """The member named by `word` (as a file or JSON spells it), or None for anything else."""
        try:
            return cls(word)
        except ValueError:
            return None


_RANK = {severity: rank for rank, severity in enumerate(Severity)}
