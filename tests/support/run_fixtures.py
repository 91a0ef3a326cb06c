"""The fixed run of backend.demo.sample_run in the shapes
the console's messages carry (Pilot and snapshot use)."""

from __future__ import annotations

from backend.demo.sample_run import JOB, T0, collector, log_text, metric_lines, metrics, snapshot, store
from backend.signals.monitor import MetricsSnapshot
from console.messages import RunStatus

__all__ = [
    "JOB",
    "T0",
    "collector",
    "log_text",
    "metric_lines",
    "metrics_view",
    "snapshot",
    "status",
    "store",
]


def status(state: str = "RUNNING") -> RunStatus:
    return RunStatus(JOB, state, started_at=T0, simulated=True)


def metrics_view(rollouts: int = 12, num_rollout: int = 40) -> MetricsSnapshot:
    """The MetricsArrived payload the workers post: a frozen snapshot of real series plus
    derive_run_signals()."""
    return metrics(rollouts, num_rollout)
