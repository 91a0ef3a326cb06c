"""Hostile input, round 2 (issue 36): launch is one step. Against an in-memory dashboard (the real race is
tests/hostile/test_hostile_ray.py): a run that became active after an earlier check is seen at the submit, the
audit intent is on disk before anything reaches Ray, and a claim another console holds is waited for, then
refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.cluster import launch_claim
from backend.cluster.audit import AuditLog
from backend.cluster.controller import LaunchRefused, RunController
from backend.cluster.dashboard import DuplicateSubmission, JobInfo, JobNotFound
from backend.cluster.launch_claim import CLAIM_ID, ClaimBusy
from backend.plan.spec import build_spec

PRESET = "nemotron-3-ultra-550b-a55b"


class MemoryRay:
    """The Jobs API as a dict: a submit with an existing id is refused, as Ray does."""

    address = "memory"

    def __init__(self, audit: AuditLog) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self.audit = audit
        self.audit_at_submit: list[str] = []

    async def submit(self, payload: dict[str, Any]) -> str:
        sid = str(payload["submission_id"])
        if sid in self.jobs:
            raise DuplicateSubmission(f"job submission {sid!r} already exists")
        if sid != CLAIM_ID:
            self.audit_at_submit = [e.result for e in self.audit.entries()]
        self.jobs[sid] = JobInfo(submission_id=sid, metadata=payload.get("metadata"), type="SUBMISSION")
        return sid

    async def get_job(self, job_id: str) -> JobInfo:
        if job_id not in self.jobs:
            raise JobNotFound(f"no job {job_id!r}")
        return self.jobs[job_id]

    async def list_jobs(self) -> list[JobInfo]:
        return list(self.jobs.values())

    async def stop_job(self, job_id: str) -> bool:
        self.jobs[job_id] = self.jobs[job_id].model_copy(update={"status": "STOPPED"})
        return True

    async def delete_job(self, job_id: str) -> bool:
        return self.jobs.pop(job_id, None) is not None

    async def _send(self, *args: Any, **kw: Any) -> None:
        return None  # the shim package "is there already"


def _ctl(tmp_path: Path) -> tuple[RunController, MemoryRay]:
    ctl = RunController(None, state_dir=tmp_path)  # type: ignore[arg-type]
    ray = MemoryRay(ctl.audit)
    ctl.client = ray  # type: ignore[assignment]
    return ctl, ray


async def test_a_run_started_after_the_check_is_seen_right_before_the_submit(tmp_path: Path) -> None:
    ctl, ray = _ctl(tmp_path)
    spec = build_spec(PRESET, [])
    await ctl.check(spec, check_cluster=False)  # passed: nothing active yet
    ray.jobs["theirs"] = JobInfo(submission_id="theirs", metadata={"ultra_console": "1"}, status="RUNNING")
    with pytest.raises(LaunchRefused, match="theirs"):
        await ctl.launch(spec, check_cluster=False)
    assert set(ray.jobs) == {"theirs", CLAIM_ID} and ray.jobs[CLAIM_ID].is_terminal  # released
    assert ctl.audit.entries()[-1].result.startswith("launch refused")


async def test_the_audit_intent_is_written_before_the_submit_and_completed_after(tmp_path: Path) -> None:
    ctl, ray = _ctl(tmp_path)
    ray.jobs[CLAIM_ID] = JobInfo(submission_id=CLAIM_ID, status="SUCCEEDED")  # an expired claim: taken over
    job = await ctl.launch(build_spec(PRESET, []), check_cluster=False, run_id="261202-150000-000")
    assert ray.audit_at_submit and ray.audit_at_submit[-1].startswith("submitting")
    assert [e.result for e in ctl.audit.entries()][-1] == "submitted" and job.id.endswith("150000-000")
    assert ray.jobs[CLAIM_ID].is_terminal


async def test_a_claim_held_by_another_console_is_waited_for_then_refused(tmp_path: Path) -> None:
    _, ray = _ctl(tmp_path)
    ray.jobs[CLAIM_ID] = JobInfo(
        submission_id=CLAIM_ID,
        status="RUNNING",
        metadata={"ultra_console_claim": "r1", "user": "bob\x1b]8;;", "host": "h", "pid": "7"},
    )
    with pytest.raises(ClaimBusy) as busy:
        await launch_claim.take(ray, "r2", "me", wait_s=0.2)  # type: ignore[arg-type]
    assert "another console is launching" in str(busy.value) and "run r1" in str(busy.value)
    assert busy.value.exit_code == 2 and "\x1b" not in str(busy.value) and "bob\\x1b" in str(busy.value)
    assert not ray.jobs[CLAIM_ID].is_terminal  # someone else's claim is never stopped


async def test_a_job_id_is_one_escaped_path_segment_in_every_dashboard_call() -> None:
    import httpx

    from backend.cluster.dashboard import RayClient

    seen: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200, json={"submission_id": "x", "stopped": True, "deleted": True})

    odd = "a\x07b?c#d/e%f \u202e字"
    async with RayClient("http://127.0.0.1:9") as client:
        client._http = httpx.AsyncClient(base_url=client.url, transport=httpx.MockTransport(answer))
        await client.get_job(odd)
        await client.stop_job(odd)
        await client.delete_job(odd)
    escaped = b"/api/jobs/a%07b%3Fc%23d%2Fe%25f%20%E2%80%AE%E5%AD%97"
    assert seen == [escaped, escaped + b"/stop", escaped]  # before: an invalid URL (an internal error)


async def test_an_audit_intent_that_cannot_be_written_refuses_the_launch_before_ray_sees_it(
    tmp_path: Path,
) -> None:
    import os

    from backend.cluster.audit import AuditError

    ctl, ray = _ctl(tmp_path)
    os.mkfifo(tmp_path / "audit.jsonl")  # or a full disk, a link to /dev/zero: the entry cannot be written
    with pytest.raises(AuditError, match="cannot write the audit log"):
        await ctl.launch(build_spec(PRESET, []), check_cluster=False)
    assert set(ray.jobs) == {CLAIM_ID} and ray.jobs[CLAIM_ID].is_terminal  # no run submitted; claim released


def test_the_run_view_shows_a_hostile_job_id_escaped_and_bounded() -> None:
    from backend.cluster.controller import RunEvent, RunPhase
    from console.workers import run_status

    odd = "ultra\x07odd\x1b]8;;x\u202e" + "字" * 200
    status = run_status(RunEvent("state", RunPhase.RUNNING, JobInfo(submission_id=odd, status="RUNNING")))
    assert status is not None
    shown = status.job_id
    assert shown.startswith("ultra\\x07odd\\x1b]8;;x\\u202e字") and len(shown) <= 96  # before: "ultraodd"
    assert not any(ord(c) < 32 or 0x202A <= ord(c) <= 0x202E for c in shown)
