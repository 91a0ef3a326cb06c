"""The replay app's only worker: read the rest of a saved log, a dump directory, or a finished job's log into
the session's store, and post what the views draw (the same messages a live run posts).

The first piece of a log is already in the store when the app starts (backend.signals.replay), so the logs
view has content on its first frame; this worker streams the rest in a thread, posting LogAppended and
MetricsArrived at most a few times a second, so the operator scrolls while the charts fill.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable

from backend.cluster.dashboard import RayClient
from backend.cluster.job_replay import read_job_log
from backend.errors import ConsoleError
from backend.severity import Severity
from backend.signals.replay import ReplaySession
from console.compare import add_run
from console.host import ConsoleHost
from console.messages import HistoryProgress, LogAppended, Notice, RunStateChanged, RunStatus
from console.workers import ConsoleSession
from shim.package import carries_shim

POST_EVERY_S = 0.5


class OfflineSession(ConsoleSession):
    """A ConsoleSession without a cluster: the session's store and monitor, read-only."""

    def __init__(self, app: ConsoleHost, replay: ReplaySession) -> None:
        # no RayClient: nothing talks to Ray
        self.app = app
        self.replay = replay
        self.store = replay.store
        self.monitor = replay.monitor
        self.rollouts = replay.rollouts
        self.job_id = replay.source.name
        self.live = False  # a replay's alerts are the log's, never news to say on the terminal
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
        self.post(LogAppended(len(self.replay.store)))
        self.post(
            HistoryProgress(
                self.replay.source.name, len(self.replay.store), done=False, log_span=self.replay.log_span()
            )
        )
        self.maybe_post_metrics(force=force)


def start(app: ConsoleHost, replay: ReplaySession) -> OfflineSession:
    session = OfflineSession(app, replay)
    app.session = session
    if replay.problem:
        session.post(Notice(replay.problem, Severity.WARNING))
    session.post(RunStateChanged(RunStatus(replay.source.name, "REPLAY")))
    session.post(LogAppended(len(replay.store)))
    if replay.source.kind == "job":
        app.run_worker(
            _job(session),
            group="replay",
            exclusive=True,
            exit_on_error=False,
            description=f"replay of job {replay.source.job_id}",
        )
    else:
        app.run_worker(
            _load(session),
            group="replay",
            exclusive=True,
            exit_on_error=False,
            description=f"replay of {replay.source.path}",
        )
    return session


def _done(session: OfflineSession) -> None:
    session.post(LogAppended(len(session.replay.store)))
    session.post(
        HistoryProgress(
            session.replay.source.name,
            len(session.replay.store),
            done=True,
            log_span=session.replay.log_span(),
        )
    )
    records = sum(session.monitor.collector.records.values()) if session.monitor is not None else 0
    if (
        session.monitor is not None
    ):  # read to its end: a log with no metric is a blind spot, said like any other
        with session.monitor.lock:
            session.monitor.alerts.check_log_without_metrics(
                f"the log of {session.replay.source.name}",
                session.monitor.activity.lines,
                records,
                session.monitor.activity.last_line,
            )
    session.maybe_post_metrics(force=True)
    if session.replay.front_lost:  # nothing is missing, but a process of ours stopped: said, not hidden
        session.post(Notice(f"{session.replay.front_lost}: the rest was read here", Severity.INFO))
    if session.monitor is None:
        return
    found = session.monitor.diagnosis()
    if found is not None:  # why it died: the one answer a replay of a failed run is opened for
        session.post(Notice(f"{found.headline}", Severity.ERROR))
    if records == 0:
        session.post(
            Notice(
                f"no miles metric found in {session.replay.source.name}: the charts stay empty",
                Severity.WARNING,
            )
        )


def internal_error(what: str, err: Exception) -> str:
    """One line for an operator: what stopped and the error's kind, never a traceback."""
    text = " ".join(str(err).split())[:200]
    detail = f": {text}" if text else ""
    return f"{what}: internal error {type(err).__name__}{detail} (the log read so far is kept)"


async def _load(session: OfflineSession) -> None:
    """Pieces are read and indexed in one thread, step after step, never waiting for the event loop between
    two (a hop back per piece waited for whatever the loop was drawing); messages are posted from the loop,
    in the app's own context, so they go to the views once and never bubble back. A cancelled worker (the
    app quits) stops the thread at its next piece."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    stop = threading.Event()

    def tick() -> None:
        try:
            loop.call_soon_threadsafe(session.progress, context=context)
        except RuntimeError:  # the loop closed under a quitting app: read no further
            stop.set()

    try:
        await asyncio.to_thread(_read_steps, session.replay, tick, stop)
    except asyncio.CancelledError:
        stop.set()
        raise
    except ConsoleError as err:
        session.post(Notice(f"replay stopped: {err}", Severity.ERROR))
    except Exception as err:  # a bug must say so, not leave "reading history" on screen for ever
        session.post(Notice(internal_error("replay stopped", err), Severity.ERROR))
    await asyncio.to_thread(session.replay.finish)
    _done(session)
    await _compare_with(session)


def _read_steps(replay: ReplaySession, tick: Callable[[], None], stop: threading.Event) -> None:
    while not stop.is_set() and replay.load_step():
        tick()


async def _compare_with(session: OfflineSession) -> None:
    """`replay A B C`: once A is read, B and C, each overlaid as it is read."""
    for target in session.app.compare_targets:
        await add_run(session.app, target)


async def _job(session: OfflineSession) -> None:
    """A job on the cluster: its whole log, once (a replay does not follow)."""
    settings = session.app.settings
    job_id = session.replay.source.job_id or ""
    token = settings.token_text()
    try:
        async with RayClient(settings.address, token) as client:
            job = await client.get_job(job_id)
            if session.monitor is not None:
                session.monitor.expect_shim(carries_shim(job.runtime_env))
            session.post(RunStateChanged(RunStatus(job.id, f"REPLAY {job.status}")))
            if not job.is_terminal:
                session.post(
                    Notice(
                        f"job {job.id} is still {job.status}: replaying its log so far (attach with "
                        f"`ultra-console --job {job.id}` to follow it)",
                        Severity.WARNING,
                    )
                )
            await read_job_log(session.replay, client, job, session.progress)
    except ConsoleError as err:
        session.post(Notice(f"replay of job {job_id} incomplete: {err}", Severity.ERROR))
    except Exception as err:  # as in _load
        session.post(Notice(internal_error(f"replay of job {job_id} incomplete", err), Severity.ERROR))
    await asyncio.to_thread(session.replay.finish)
    _done(session)
    await _compare_with(session)
