"""A finished (or running) job's whole log, read once from the cluster into a replay session.

Why here: it is the cluster's I/O (the dashboard client) feeding the signals room's replay session; both the
`replay` worker and "compare with…" read a job this way, and neither owns the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from backend.cluster.dashboard import JobInfo, RayClient
from backend.signals.replay import ReplaySession

JOB_BATCH_LINES = 20_000  # lines of a job's log per store append


async def read_job_log(
    session: ReplaySession, client: RayClient, job: JobInfo, progress: Callable[[], None] | None = None
) -> None:
    """A job's whole log from the cluster into `session`, with its entrypoint and status (a replay does not
    follow)."""
    session.entrypoint, session.job_status = job.entrypoint, job.status
    batch: list[str] = []
    async for line in client.read_log(job.id):
        batch.append(line)
        if len(batch) >= JOB_BATCH_LINES:
            await asyncio.to_thread(session.append_lines, batch)
            batch = []
            if progress is not None:
                progress()
    await asyncio.to_thread(session.append_lines, batch)
