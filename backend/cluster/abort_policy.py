"""One abort escalation for the app and the CLI: graceful stop, a bounded wait, then (separately) force.

The graceful stop is Ray's: its supervisor sends the job's stop signal to the driver's process tree,
waits the job's grace period (`RAY_JOB_STOP_SIGNAL`, `RAY_JOB_STOP_WAIT_TIME_S` in the job's runtime env,
set at launch by backend.plan.submission; Ray's own defaults for jobs launched elsewhere), then SIGKILLs
what is left. The console watches for the terminal state for that grace plus a margin (Ray's SIGKILL,
the supervisor's report and one poll); only when the job is still alive then is force offered, and
force is a second, separate confirmation. Leftovers are read once the job is terminal, each node's
answer bounded, and a leftover is signalled SIGTERM, then SIGKILL after a short grace.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.cluster.dashboard import JobInfo
from backend.json_fields import Fields

RAY_DEFAULT_STOP_SIGNAL = "SIGTERM"
RAY_DEFAULT_STOP_WAIT_S = 3
WATCH_MARGIN_S = 30.0  # after the grace period: Ray's SIGKILL, the supervisor's report, one poll
FORCE_WAIT_S = 60.0  # after force: the kill job's start on the node plus Ray marking the job STOPPED
LEFTOVER_CHECK_S = 45.0  # one node's on-node reading, from submit to its answer (a reaper job)
LEFTOVER_KILL_GRACE_S = 5.0  # SIGTERM to SIGKILL for a leftover process
LEFTOVER_KILL_S = 90.0  # one node's kill job, all its PIDs included


@dataclass(frozen=True)
class AbortPolicy:
    """How one job is stopped, and how long the console waits at each step."""

    signal: str
    grace_s: int
    stop_wait_s: float
    force_wait_s: float = FORCE_WAIT_S
    leftover_check_s: float = LEFTOVER_CHECK_S
    leftover_kill_grace_s: float = LEFTOVER_KILL_GRACE_S
    leftover_kill_s: float = LEFTOVER_KILL_S

    def wait_s(self, forced: bool) -> float:
        """How long to watch for the terminal state after the step just taken."""
        return self.force_wait_s if forced else self.stop_wait_s

    def stop_message(self) -> str:
        return (
            f"stop requested: Ray sends {self.signal} to the driver's process tree, waits up to "
            f"{self.grace_s} s for a clean shutdown, then SIGKILLs what is left"
        )


def stop_settings(job: JobInfo) -> tuple[str, int]:
    """(signal, grace seconds) Ray's supervisor will use
    for this job (its runtime env, else Ray's defaults)."""
    env = Fields.of(job.runtime_env).obj("env_vars")  # Ray holds env var values as text
    signal = env.text("RAY_JOB_STOP_SIGNAL", RAY_DEFAULT_STOP_SIGNAL)
    try:
        wait = int(env.text("RAY_JOB_STOP_WAIT_TIME_S") or RAY_DEFAULT_STOP_WAIT_S)
    except ValueError:
        wait = RAY_DEFAULT_STOP_WAIT_S
    return signal, wait


def abort_policy(job: JobInfo, *, wait_s: float | None = None) -> AbortPolicy:
    """The policy for `job`; `wait_s` (the operator's `--timeout`) overrides how long to watch for the
    terminal state after the graceful stop and after force."""
    signal, grace = stop_settings(job)
    if wait_s is not None:
        return AbortPolicy(signal, grace, wait_s, force_wait_s=wait_s)
    return AbortPolicy(signal, grace, grace + WATCH_MARGIN_S)
