"""The replay app's only worker: read the rest of a saved log, a dump directory, or a finished job's log into
the session's store, and post what the views draw (the same messages a live run posts).

The first piece of a log is already in the store when the app starts (backend.signals.replay), so the logs
view has content on its first frame; this worker streams the rest in a thread, posting LogAppended and
MetricsArrived at most a few times a second, so the operator scrolls while the charts fill.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from backend.errors import ConsoleError
from console.messages import HistoryProgress, LogAppended, Notice, RunStateChanged, RunStatus
from console.workers import ConsoleSession

if TYPE_CHECKING:
    from collections.abc import Callable

    from backend.cluster.dashboard import JobInfo, RayClient
    from backend.signals.replay import ReplaySession
    from console.app import UltraConsoleApp

POST_EVERY_S = 0.25
JOB_BATCH_LINES = 20_000  # lines of a job's log per store append


class OfflineSession(ConsoleSession):
    """A ConsoleSession without a cluster: the session's store and monitor, read-only."""

    def __init__(
        self, app: UltraConsoleApp, session: ReplaySession
    ) -> None:  # no RayClient: nothing talks to Ray
        self.app = app
        self.session = session
        self.store = session.store
        self.monitor = session.monitor
        self.rollouts = session.rollouts
        self.job_id = session.source.name
        self._alerts_posted = 0
        self._metrics_seen = 0
        self._metrics_posted_at = 0.0
        self._posted_at = 0.0

    def progress(self, *, force: bool = False) -> None:
        """Post how far the read has come, at most every POST_EVERY_S (unless `force`)."""
        now = time.monotonic()
        if not force and now - self._posted_at < POST_EVERY_S:
            return
        self._posted_at = now
        self.post(LogAppended(len(self.session.store)))
        self.post(HistoryProgress(self.session.source.name, len(self.session.store), done=False))
        self.maybe_post_metrics(force=force)


def start(app: UltraConsoleApp, session: ReplaySession) -> OfflineSession:
    runtime = OfflineSession(app, session)
    app.runtime = runtime
    if session.problem:
        runtime.post(Notice(session.problem, "warning"))
    runtime.post(RunStateChanged(RunStatus(session.source.name, "REPLAY")))
    runtime.post(LogAppended(len(session.store)))
    if session.source.kind == "job":
        app.run_worker(
            _job(runtime),
            group="replay",
            exclusive=True,
            exit_on_error=False,
            description=f"replay of job {session.source.job_id}",
        )
    else:
        app.run_worker(
            _load(runtime),
            group="replay",
            exclusive=True,
            exit_on_error=False,
            description=f"replay of {session.source.path}",
        )
    return runtime


def _done(rt: OfflineSession) -> None:
    rt.post(LogAppended(len(rt.session.store)))
    rt.post(HistoryProgress(rt.session.source.name, len(rt.session.store), done=True))
    records = sum(rt.monitor.collector.records.values()) if rt.monitor is not None else 0
    if rt.monitor is not None:  # read to its end: a log with no metric is a blind spot, said like any other
        with rt.monitor.lock:
            rt.monitor.alerts.check_log_without_metrics(
                f"the log of {rt.session.source.name}",
                rt.monitor.activity.lines,
                records,
                rt.monitor.activity.last_line,
            )
    rt.maybe_post_metrics(force=True)
    if rt.monitor is None:
        return
    found = rt.monitor.diagnosis()
    if found is not None:  # why it died: the one answer a replay of a failed run is opened for
        rt.post(Notice(f"{found.headline}", "error"))
    if records == 0:
        rt.post(
            Notice(f"no miles metric found in {rt.session.source.name}: the charts stay empty", "warning")
        )


async def _load(rt: OfflineSession) -> None:
    """Pieces are read and indexed in a thread; messages are posted from here (the app's own context, so
    they go to the views once and never bubble back)."""
    import asyncio

    try:
        while await asyncio.to_thread(rt.session.load_step):
            rt.progress()
    except ConsoleError as err:
        rt.post(Notice(f"replay stopped: {err}", "error"))
    await asyncio.to_thread(rt.session.finish)
    _done(rt)
    await _compare_with(rt)


async def _compare_with(rt: OfflineSession) -> None:
    """`replay A B C`: once A is read, B and C, each overlaid as it is read."""
    from console.compare import add_run

    for target in rt.app.compare_targets:
        await add_run(rt.app, target)


async def read_job_log(
    session: ReplaySession, client: RayClient, job: JobInfo, progress: Callable[[], None] | None = None
) -> None:
    """A job's whole log from the cluster into `session`, with its entrypoint and status (a replay does not
    follow)."""
    import asyncio

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


async def _job(rt: OfflineSession) -> None:
    """A job on the cluster: its whole log, once (a replay does not follow)."""
    import asyncio

    from backend.cluster.dashboard import RayClient

    settings = rt.app.settings
    job_id = rt.session.source.job_id or ""
    token = settings.token.get_secret_value() if settings.token else None
    try:
        async with RayClient(settings.address, token) as client:
            job = await client.get_job(job_id)
            if rt.monitor is not None:
                from shim.package import carries_shim

                rt.monitor.expect_shim(carries_shim(job.runtime_env))
            rt.post(RunStateChanged(RunStatus(job.id, f"REPLAY {job.status}")))
            if not job.is_terminal:
                rt.post(
                    Notice(
                        f"job {job.id} is still {job.status}: replaying its log so far (attach with "
                        f"`ultra-console --job {job.id}` to follow it)",
                        "warning",
                    )
                )
            await read_job_log(rt.session, client, job, rt.progress)
    except ConsoleError as err:
        rt.post(Notice(f"replay of job {job_id} incomplete: {err}", "error"))
    await asyncio.to_thread(rt.session.finish)
    _done(rt)
    await _compare_with(rt)
