"""A run's status in words: the `status` command's JSON, and one readable reason for a FAILED job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backend.cluster.abort_policy import stop_settings
from backend.cluster.dashboard import JobInfo
from backend.cluster.job_identity import is_run, job_kind, run_id_of
from backend.cluster.telemetry import ClusterSnapshot
from backend.signals.clock import seconds_from_ms

if TYPE_CHECKING:
    from backend.cluster.controller import RunPhase


def failure_reason(job: JobInfo, snap: ClusterSnapshot | None = None) -> str | None:
    """One readable reason for a FAILED job: Ray's error type and message head, plus the dead
    node it ran on when telemetry knows it."""
    if job.status != "FAILED":
        return None
    head = _message_head((job.message or "").strip())
    reason = f"{job.error_type}: {head}" if job.error_type else head
    node = snap.node(job.driver_node_id) if snap is not None and job.driver_node_id else None
    if node is not None and not node.alive:
        reason += f" (driver node {node.label} is {node.state}: {node.death_reason})"
    return reason


def _message_head(message: str) -> str:
    """Ray's message in one line; when it quotes the last logs, their last error line instead of them."""
    head = message.splitlines()[0] if message else "no message from Ray"
    if "last available logs" not in head:
        return head
    tail = [ln for ln in message.splitlines()[1:] if ln.strip()]
    errors = [ln for ln in tail if "Error" in ln or "error" in ln]
    return head.split(",")[0] + (f"; last error: {errors[-1].strip()[:300]}" if errors else "")


def describe(
    job: JobInfo, snap: ClusterSnapshot | None = None, phase: RunPhase | None = None
) -> dict[str, Any]:
    """The JSON the `status` command prints (and the app's run header reads)."""
    return {
        "job": job.id,
        "kind": job_kind(job),
        "run_id": run_id_of(job),
        "status": (phase.value if phase else job.status),
        "ray_status": job.status,
        "message": (job.message or "").splitlines()[0] if job.message else None,
        "error_type": job.error_type,
        "failure_reason": failure_reason(job, snap),
        "start_time": seconds_from_ms(job.start_time),
        "end_time": seconds_from_ms(job.end_time),
        "driver_node_id": job.driver_node_id,
        "stop": dict(zip(("signal", "grace_s"), stop_settings(job), strict=True)),
        "is_run": is_run(job),
    }
