"""The cluster-wide launch claim: one console at a time checks and submits a run.

Why a Ray job and not a lock file: two consoles may run on two hosts, or as two users, and both talk to the
same dashboard. Ray refuses a second job with a submission id that already exists (its job table is written
with overwrite=False, so the test is atomic), which makes one fixed submission id a mutex every launcher sees
in the dashboard's job list. The claim job sleeps `HOLD_S` and exits: a console killed while holding it blocks
other launches for at most that long, and the job's metadata says who holds it. A released or expired claim is
terminal; the next launcher deletes it and submits its own.

Holding the claim, the controller re-reads the job list and the cluster (the active-run check and preflight's
verdict) and submits; so the second of two simultaneous `launch --yes` sees the first one's run and is
refused with P3.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
import time
from collections.abc import AsyncIterator

from backend.cluster.dashboard import DuplicateSubmission, JobInfo, JobNotFound, RayApiError, RayClient
from backend.cluster.job_identity import CLAIM_KEY
from backend.errors import RefusedError
from backend.sanitize import shown_name

CLAIM_ID = "ultra-console-launch-claim"
HOLD_S = 60  # the longest a killed console's claim blocks others
WAIT_S = 30.0  # how long a launcher waits for another's claim before it refuses
POLL_S = 0.5


class ClaimBusy(RefusedError):
    """Another console holds the launch claim (it is launching now) and did not release it in time."""

    exit_code = 2


def claim_payload(run_id: str, user: str) -> dict[str, object]:
    """The claim job: no resources, no runtime env (nothing that can fail or queue), a bounded life."""
    return {
        "submission_id": CLAIM_ID,
        "entrypoint": shlex.join(["python3", "-c", f"import time; time.sleep({HOLD_S})"]),
        "metadata": {
            CLAIM_KEY: run_id,
            "user": user,
            "host": socket.gethostname()[:64],
            "pid": str(os.getpid()),
            "claimed_at": f"{time.time():.3f}",
        },
    }


def holder(job: JobInfo) -> str:
    """Who holds the claim, as one phrase (the metadata is the network's text: shown, never raw)."""

    def field(key: str) -> str:
        return shown_name(job.meta.string(key) or "?", 40)

    return f"{field('user')}@{field('host')} pid {field('pid')}, run {field(CLAIM_KEY)}"


async def _try_take(client: RayClient, payload: dict[str, object]) -> JobInfo | None:
    """Submit the claim; None when taken, else the live claim that holds it (a dead one is deleted)."""
    try:
        await client.submit(payload)
        return None
    except DuplicateSubmission:
        pass
    try:
        held = await client.get_job(CLAIM_ID)
    except JobNotFound:  # released and deleted in between: try again
        return JobInfo(submission_id=CLAIM_ID, status="STOPPED")
    if held.is_terminal:
        with contextlib.suppress(JobNotFound, RayApiError):  # another launcher deleted it, or took it anew
            await client.delete_job(CLAIM_ID)
    return held


async def take(client: RayClient, run_id: str, user: str, *, wait_s: float = WAIT_S) -> dict[str, object]:
    """Take the claim, waiting up to `wait_s` for another console's; raises ClaimBusy after that. Returns
    the claim's payload (release names it)."""
    payload = claim_payload(run_id, user)
    deadline = time.monotonic() + wait_s
    while True:
        held = await _try_take(client, payload)
        if held is None:
            return payload
        if time.monotonic() >= deadline and not held.is_terminal:
            raise ClaimBusy(
                f"launch refused: another console is launching ({holder(held)}); its claim "
                f"{CLAIM_ID} ends within {HOLD_S} s: try again then"
            )
        await asyncio.sleep(POLL_S)


async def release(client: RayClient, payload: dict[str, object]) -> None:
    """Stop our claim (it ends STOPPED; the next launcher deletes it), only if it is still ours: one that
    expired may be another console's now. Best effort: it expires anyway."""
    with contextlib.suppress(RayApiError):
        held = await client.get_job(CLAIM_ID)
        ours = payload["metadata"]
        assert isinstance(ours, dict)
        if not held.is_terminal and all(held.meta.string(k) == v for k, v in ours.items()):
            await client.stop_job(CLAIM_ID)


@contextlib.asynccontextmanager
async def claimed(
    client: RayClient, run_id: str, user: str, *, wait_s: float = WAIT_S
) -> AsyncIterator[None]:
    """`async with claimed(client, run_id, user):` check and submit; the claim is released on the way out."""
    payload = await take(client, run_id, user, wait_s=wait_s)
    try:
        yield
    finally:
        await release(client, payload)
