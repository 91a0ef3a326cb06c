"""miles' dashboard flags (`run.miles_dashboard`) and what the plan view says about them.

A module of its own, stdlib only: the plan view's first frame says whether per-rank phases are on, and
the submission stack (pydantic, the spec) would cost that frame ~0.24 s (bench/console_frame.py).
"""

from __future__ import annotations

DASHBOARD_FLAGS = ("--use-miles-dashboard", "--dashboard-flush-interval", "1")  # run.miles_dashboard


def phases_note(command: str) -> str:
    """What the plan view says about per-rank phases (the timeline, stragglers, the ranks a hang names): they
    come from miles' dashboard stream, which `run.miles_dashboard` turns on with DASHBOARD_FLAGS."""
    flags = " ".join(DASHBOARD_FLAGS)
    if DASHBOARD_FLAGS[0] in command.split():
        return f"per-rank phases: on (run.miles_dashboard adds {flags})"
    return (
        f"per-rank phases (timeline, stragglers, which ranks a hang holds) need run.miles_dashboard = true, "
        f"which adds {flags} to argv; without it only rank 0's Timer lines in the log"
    )
