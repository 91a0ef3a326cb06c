"""Run-controller facts derived from Ray's job records (record shapes as Ray 2.60's job API returns them)."""

from __future__ import annotations

from backend.cluster.abort_policy import stop_settings
from backend.cluster.dashboard import JobInfo
from backend.cluster.status_report import describe, failure_reason
from backend.cluster.telemetry import ClusterSnapshot, NodeSnapshot

DEAD = "2e3455" + "0" * 50


def test_stop_settings_from_runtime_env_else_ray_defaults() -> None:
    ours = JobInfo(
        status="RUNNING",
        runtime_env={"env_vars": {"RAY_JOB_STOP_SIGNAL": "SIGINT", "RAY_JOB_STOP_WAIT_TIME_S": "120"}},
    )
    assert stop_settings(ours) == ("SIGINT", 120)
    assert stop_settings(JobInfo(status="RUNNING")) == ("SIGTERM", 3)
    assert stop_settings(
        JobInfo(status="RUNNING", runtime_env={"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "x"}})
    ) == ("SIGTERM", 3)


def test_failure_reason_entrypoint_error_keeps_last_error_line() -> None:
    message = (
        "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
        "step 3: {...}\n"
        "ray.exceptions.ActorDiedError: The actor died because its node has died. Node Id: 2e34\n"
    )
    job = JobInfo(
        submission_id="j", status="FAILED", message=message, error_type="JOB_ENTRYPOINT_COMMAND_ERROR"
    )
    reason = failure_reason(job)
    assert reason is not None and reason.startswith(
        "JOB_ENTRYPOINT_COMMAND_ERROR: Job entrypoint command failed with exit code 1"
    )
    assert "last error: ray.exceptions.ActorDiedError: The actor died because its node has died" in reason
    assert "\n" not in reason
    assert failure_reason(JobInfo(status="RUNNING")) is None


def test_failure_reason_names_the_dead_driver_node() -> None:
    job = JobInfo(
        submission_id="j",
        status="FAILED",
        error_type="JOB_SUPERVISOR_ACTOR_DIED",
        driver_node_id=DEAD,
        message="Job supervisor actor died: The actor died because its node has died.",
    )
    snap = ClusterSnapshot(
        nodes=[
            NodeSnapshot(
                node_id=DEAD,
                name="n5",
                alive=False,
                state="DEAD",
                death_reason="health check failed due to missing too many heartbeats",
            )
        ]
    )
    reason = failure_reason(job, snap)
    assert reason is not None and reason.startswith("JOB_SUPERVISOR_ACTOR_DIED: Job supervisor actor died")
    assert reason.endswith(
        "(driver node n5 (2e345500) is DEAD: health check failed due to missing too many heartbeats)"
    )
    info = describe(job, snap)
    assert (
        info["failure_reason"] == reason and info["kind"] == "other" and info["stop"]["signal"] == "SIGTERM"
    )
