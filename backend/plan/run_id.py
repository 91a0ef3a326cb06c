"""A run's id, the way miles makes it: stdlib only, so the preview helper's first answer (which carries
one) is out before the plan stack (pydantic, the spec) is imported."""

from __future__ import annotations

from datetime import datetime, timezone


def new_run_id(now: datetime | None = None) -> str:
    """`YYMMDD-HHMMSS-NNN` (UTC, NNN = milliseconds), like miles' create_run_id."""
    now = now or datetime.now(timezone.utc)
    return now.strftime("%y%m%d-%H%M%S-") + f"{now.microsecond // 1000:03d}"
