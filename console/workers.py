"""All of the console's Ray I/O, in Textual workers that only post messages (harlequin's rule).

Workers never touch widgets. Each one talks to backend (RayClient, RunController, TelemetryPoller,
LogStore, MetricsCollector) and posts a console.messages message; the app and the views draw.

- run:       attach to `--job`, else the latest active run, else the latest run; then the controller's
             watch loop (state changes, dashboard lost/back). A launch from the plan view goes
             through the same controller, so its new job is picked up here too.
- logs:      for the attached job, rebuild the history from Ray (progress posted as it goes), then
             follow the live log, through backend.signals.ingest (batched, <= 10 posts/s) into the
             run's LogStore and RunMonitor.
- metrics:   the store feeds backend.signals.monitor.RunMonitor (metrics, facts, alerts) through its listener;
             MetricsArrived (series + derived signals + each series' source) at most 2/s, AlertsChanged when
             alerts fire.
- structured: the run's `--dump-details` files (miles' events and dashboard streams; the driver runs on the
             head, so they are local) polled every second into the same monitor, off the UI thread; a lock
             keeps that and the log feed from changing the monitor at once.
- probe:     the console's GPU probe (backend.cluster.gpu_probe): adopted or started (never by a --readonly
             console), its lease renewed, its log followed into the newest NVML reading per node.
- telemetry: cluster snapshots at 1 Hz, only while a view
  that shows them is visible, and at once when the probe
             has a new reading (per node: the probe first, miles' GPU streams of the attached run second,
             Ray's reporter third).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from backend.cluster.controller import NoRunFound, RunController, RunEvent
from backend.cluster.dashboard import JobInfo, RayClient, job_what
from backend.cluster.gpu_probe import GpuProbe
from backend.cluster.incidents import Entry, ledger_dir, since_last_looked, since_lines
from backend.cluster.job_identity import active_runs
from backend.cluster.leftovers import job_actors, job_roles
from backend.cluster.telemetry import ClusterSnapshot, TelemetryPoller
from backend.cluster.watcher import options_from
from backend.errors import ConsoleError
from backend.redaction import public_line
from backend.sanitize import shown_name
from backend.severity import Severity
from backend.signals.clock import seconds_from_ms
from backend.signals.ingest import LIVE_FLUSH_S, LogChunk, RunLog, text_chunks
from backend.signals.monitor import RunMonitor
from backend.signals.replay import RolloutIndex
from backend.signals.store import LogStore
from backend.signals.structured import StructuredFeed, dump_dir_of
from console.host import ConsoleHost
from console.messages import (
    AlertsChanged,
    ConsoleMessage,
    DashboardBack,
    DashboardLost,
    HistoryProgress,
    LogAppended,
    LogStoreOpened,
    MetricsArrived,
    Notice,
    RunStateChanged,
    RunStatus,
    SinceLastLooked,
    SnapshotArrived,
    TerminalAlert,
)
from console.terminal_alerts import TerminalAlerts
from shim.package import carries_shim

TELEMETRY_INTERVAL_S = 1.0
METRICS_EVERY_S = 0.5
# While history is read (a replay, an attach's catch-up) the charts redraw every 2 s: each redraw is ~0.1 s
# of the UI thread at 200x50 (plotext), taken from the read it shares the interpreter with.
HISTORY_METRICS_EVERY_S = 2.0
TICK_S = 5.0
STRUCTURED_POLL_S = 1.0
ROLES_EVERY_S = 15.0  # the attached run's actors (one request), to name the GPU holders the probe lists
ACTORS_EVERY_S = 20.0  # the job's actor list (one state API request) for the shim check


def run_status(event: RunEvent) -> RunStatus | None:
    """The run's state for the views; a job record is the network's text, cleaned before any view."""
    job = event.job
    state = event.state.value if event.state is not None else (job.status if job else "?")
    if job is None:
        return RunStatus(public_line(event.text.removeprefix("submitting ")) or "?", public_line(state))
    return RunStatus(
        public_line(shown_name(job.id)),  # escaped, bounded: an id with controls is shown, never mangled
        public_line(state),
        seconds_from_ms(job.start_time),
        seconds_from_ms(job.end_time),
        public_line(job.message or ""),
        job.meta.has("simulated") or "simtrainer" in (job.entrypoint or ""),
    )


class ConsoleSession:
    """The backend objects one console session uses; the app holds it as `app.session`."""

    def __init__(self, app: ConsoleHost) -> None:
        settings = app.settings
        self.app = app
        token = settings.token.get_secret_value() if settings.token else None
        self.client = RayClient(settings.address, token)
        controller = app.controller
        if controller is None:
            controller = RunController(
                self.client,
                state_dir=settings.state_dir,
                readonly=settings.readonly,
                watcher=options_from(settings),
            )
            app.controller = controller
        self.controller: RunController = controller
        self.spool_dir = Path(settings.state_dir) / "logs"
        self.store: LogStore | None = None
        self.monitor: RunMonitor | None = None
        self.structured: StructuredFeed | None = None
        self.rollouts: RolloutIndex | None = None
        self.probe: GpuProbe | None = None
        self.job_id: str | None = None
        self.terminal = TerminalAlerts()
        self.live = False  # the attached run's history is read: what its monitor raises now is news
        self._alerts_posted = 0
        self._metrics_seen = 0
        self._metrics_posted_at = 0.0

    def post(self, message: ConsoleMessage) -> None:
        if self.app.is_running:  # nothing is posted into an app that is shutting down
            self.app.post_message(message)

    def new_run_log(self, job_id: str) -> RunLog:
        """A fresh run log (store + monitor) for `job_id`; the logs view is told of its store (a message)."""
        if self.store is not None:
            self.store.close()
        try:
            self.monitor = RunMonitor()
        except ConsoleError as err:  # e.g. a broken alert rules file: say so, keep the console working
            self.post(Notice(f"metrics and alerts are off: {err}", Severity.WARNING))
            self.monitor = None
        run_log = RunLog.open(self.spool_dir, job_id, self.monitor)
        self.store = run_log.store
        self.structured = None
        self.rollouts = RolloutIndex()  # the `[` / `]` rollout cursor works on a live run's log too
        self.store.subscribe(self.rollouts.on_lines)
        self.job_id = job_id
        self.terminal, self.live = TerminalAlerts(), False
        self._metrics_seen = 0
        self._alerts_posted = 0
        self.post(LogStoreOpened(run_log.store))
        # every view drops the last run's figures and alerts now, not when this run's first metric comes
        if self.monitor is not None:
            self.post(MetricsArrived(self.monitor.metrics_snapshot()))
        self.post(AlertsChanged(self.monitor.alerts.snapshot() if self.monitor is not None else []))
        return run_log

    def maybe_post_metrics(self, force: bool = False) -> None:
        monitor = self.monitor
        if monitor is None:
            return
        seen = sum(monitor.collector.records.values())
        now = time.monotonic()
        every = METRICS_EVERY_S if self.live else HISTORY_METRICS_EVERY_S
        if seen != self._metrics_seen and (force or now - self._metrics_posted_at >= every):
            # frozen: the feeds keep appending; while one holds the monitor, the next call posts
            snap = monitor.metrics_snapshot() if force else monitor.metrics_snapshot_if_free()
            if snap is not None:
                self._metrics_seen = seen
                self._metrics_posted_at = now
                self.post(MetricsArrived(snap))
        self.maybe_post_alerts()

    def maybe_post_alerts(self) -> None:
        monitor = self.monitor
        if monitor is not None and monitor.alerts.version != self._alerts_posted:
            self._alerts_posted = monitor.alerts.version  # a new alert, or a blind spot's count moved
            alerts = monitor.alerts.snapshot()
            self.post(AlertsChanged(alerts, monitor.diagnosis()))
            news = self.terminal.news(alerts) if self.live else []
            if news and self.job_id is not None:
                self.post(TerminalAlert(news, self.job_id))

    def history_read(self) -> None:
        """The attached run's history is in: what it raised is old news (no bell), what comes next is not."""
        if self.monitor is not None:
            self.terminal.seen(self.monitor.alerts.snapshot())
        self.live = True


def start_workers(app: ConsoleHost) -> None:
    """Called by the app after the first frame (it imports this module then, so the I/O stack imported
    here, httpx, the run controller, the log store, never delays that frame)."""
    app.call_after_refresh(_start, app)


def _start(app: ConsoleHost) -> ConsoleSession:
    session = ConsoleSession(app)
    app.session = session
    session.controller.subscribe(lambda event: _on_run_event(session, event))
    if app.settings.gpu_probe:
        session.probe = GpuProbe(
            session.client,
            readonly=app.settings.readonly,
            lease_timeout_s=app.settings.gpu_probe_lease_timeout_s,
            on_status=lambda text: session.post(Notice(text)),
        )
        app.run_worker(
            session.probe.run(),
            group="probe",
            exclusive=True,
            exit_on_error=False,
            description="the console's GPU probe",
        )
    app.run_worker(
        _telemetry(session),
        group="telemetry",
        exclusive=True,
        exit_on_error=False,
        description="cluster telemetry",
    )
    app.run_worker(
        _run(session, app.job),
        group="run",
        exclusive=True,
        exit_on_error=False,
        description="attach and watch the run",
    )
    app.run_worker(
        _ticks(session),
        group="ticks",
        exclusive=True,
        exit_on_error=False,
        description="time-based alerts and derived signals",
    )
    return session


def _on_state(session: ConsoleSession, event: RunEvent) -> None:
    """A job state: the state line's status, the monitor's job status, and a new job's log worker."""
    status = run_status(event)
    if status is not None:
        session.post(RunStateChanged(status))
    job = event.job
    if job is None:
        return
    if job.id != session.job_id:
        _follow_new_job(session, job)
    elif session.monitor is not None:
        session.monitor.on_job_status(job.status, job.message)
        session.maybe_post_alerts()


def _follow_new_job(session: ConsoleSession, job: JobInfo) -> None:
    """Claimed here, before the worker runs: one log worker (and one store) per job, even when several
    state events of a new job arrive before its worker has started."""
    session.job_id = job.id
    session.app.run_worker(
        _logs(session, job),
        group="logs",
        exclusive=True,
        exit_on_error=False,
        description=f"log of {job.id}",
    )


async def _on_run_event(session: ConsoleSession, event: RunEvent) -> None:
    if event.kind == "state":
        _on_state(session, event)
    elif event.kind == "notice" and event.text:
        session.post(Notice(event.text))
    elif event.kind == "error":
        session.post(DashboardLost(event.text))
    elif event.kind == "recovered":
        session.post(DashboardBack())


async def _run(session: ConsoleSession, job: str | None) -> None:
    """Attach, then watch forever (also across a later launch); reconnects on its own."""
    controller = session.controller
    while controller.job is None:
        try:
            target = job
            if target is None:
                active = active_runs(await session.client.list_jobs())
                target = active[0].id if active else None
            await controller.attach(target)
        except NoRunFound:
            session.post(Notice("no training run on the cluster yet: plan one and press L to launch"))
            while controller.job is None:
                await asyncio.sleep(1.0)  # a launch from the plan view sets the job
        except ConsoleError as err:
            session.post(DashboardLost(str(err)))
            await asyncio.sleep(3.0)
    session.post(DashboardBack())
    if controller.job is not None:
        await _after_attach(session, controller.job)
    while True:
        with contextlib.suppress(ConsoleError):
            await controller.watch(until_terminal=False)
        await asyncio.sleep(controller.poll_s)


async def _after_attach(session: ConsoleSession, job: JobInfo) -> None:
    """The run's watcher (found, or started unless read-only: backend.cluster.watcher), then what it wrote
    to the ledger since this operator last looked."""
    with contextlib.suppress(ConsoleError):
        await session.controller.start_watcher(job)
    directory = ledger_dir(Path(session.app.settings.state_dir), job.id)
    try:
        entries = await asyncio.to_thread(since_last_looked, directory)
    except OSError as err:
        session.post(Notice(f"the run's incident ledger is unreadable: {err}", Severity.WARNING))
        return
    if entries:
        session.post(SinceLastLooked(job.id, since_lines(entries, limit=12), _worst(entries)))


def _worst(entries: list[Entry]) -> Severity:
    values = {s.value: s for s in Severity}
    found = [values[e.severity] for e in entries if e.severity in values]
    return min(found, key=lambda s: s.rank, default=Severity.INFO)


async def _logs(session: ConsoleSession, job: JobInfo) -> None:
    """Rebuild `job`'s history into a fresh run log (with progress), then follow it live. A spool that
    cannot be created (a full or unwritable state dir, a FIFO at its path) is one notice and the history
    marked done: never "loading history" without end."""
    try:
        run_log = session.new_run_log(job.id)
    except ConsoleError as err:
        session.post(Notice(f"the log of {job_what(job.id)} cannot be kept: {err}", Severity.ERROR))
        session.post(HistoryProgress(job.id, 0, done=True))
        return
    if session.monitor is not None:
        session.monitor.expect_shim(carries_shim(job.runtime_env))
    _start_structured(session, job)
    session.post(HistoryProgress(job.id, 0, done=False))
    try:
        async for chunk in text_chunks(session.client.read_log(job.id)):
            await _append(session, run_log, chunk)
            session.post(HistoryProgress(job.id, run_log.lines_in, done=False))
    except ConsoleError as err:
        session.post(Notice(f"log history of {shown_name(job.id)} incomplete: {err}", Severity.WARNING))
    session.post(HistoryProgress(job.id, run_log.lines_in, done=True))
    if job.is_terminal and session.monitor is not None:
        # attached after the end: the state event came before this run's monitor existed
        session.monitor.on_job_status(job.status, job.message)
    session.maybe_post_metrics(force=True)
    session.history_read()
    if job.is_terminal:
        return
    try:
        async for chunk in text_chunks(
            session.client.follow_log(job.id, start_offset=run_log.lines_in), flush_s=LIVE_FLUSH_S
        ):
            await _append(session, run_log, chunk)
    except ConsoleError as err:
        session.post(Notice(f"log follow of {shown_name(job.id)} stopped: {err}", Severity.WARNING))
    session.maybe_post_metrics(force=True)


def _start_structured(session: ConsoleSession, job: JobInfo) -> None:
    """Read the job's `--dump-details` files (named in its entrypoint) alongside its log."""
    if session.monitor is None:
        return
    # The run's shape (rollout GPUs, batch, train ranks) from its argv before the first record or failure
    # line, whichever source comes first; also without a dump dir
    # (NCCL's suspects are the ranks that did not time out).
    session.monitor.facts.scan_text(" " + job.entrypoint)
    session.app.run_worker(
        _train_actors(session, job.id),
        group="actors",
        exclusive=True,
        exit_on_error=False,
        description=f"train actors of {job.id}",
    )
    path = dump_dir_of(job.entrypoint)
    if path is None:
        return
    feed = session.structured = StructuredFeed(session.monitor, path)
    session.app.run_worker(
        _structured(session, feed, job.id),
        group="structured",
        exclusive=True,
        exit_on_error=False,
        description=f"structured outputs of {job.id}",
    )


async def _structured(session: ConsoleSession, feed: StructuredFeed, job_id: str) -> None:
    """Every second while `job_id` is the attached run: what its files gained; once more after it ended."""
    announced, bad_said = False, 0
    while session.structured is feed:
        ended = session.controller.state is not None and session.controller.state.terminal
        try:
            got = await asyncio.to_thread(feed.poll)
        except ConsoleError as err:
            session.post(
                Notice(f"structured outputs of {shown_name(job_id)} unreadable: {err}", Severity.WARNING)
            )
            return
        if got:
            if not announced:
                announced = True
                session.post(
                    Notice(f"charts read miles' structured outputs in {feed.path} first, the log second")
                )
            session.maybe_post_metrics()
        bad = feed.state().bad_lines
        if bad > bad_said:  # never blind in silence: say what could not be read, with the count
            bad_said = bad
            session.post(Notice(f"{bad} malformed line(s) skipped in {feed.path}", Severity.WARNING))
        if ended:
            session.maybe_post_metrics(force=True)
            return
        await asyncio.sleep(STRUCTURED_POLL_S)


async def _train_actors(session: ConsoleSession, job_id: str) -> None:
    """Every ACTORS_EVERY_S while `job_id` is the attached run, and once after it ended: the job's actors
    as Ray lists them, so that only a process Ray calls a train actor reports the shim (never a prefix)."""
    while session.job_id == job_id and session.monitor is not None:
        job = session.controller.job
        if job is not None and job.id == job_id:
            actors = await job_actors(session.client, job)
            if actors:  # none yet (still starting) or Ray cannot say: the reports stay unverified
                rows = [(a.pid, a.ip, a.class_name) for a in actors]
                await asyncio.to_thread(session.monitor.verify_train_actors, rows)
                session.maybe_post_alerts()
            if job.is_terminal:
                return
        await asyncio.sleep(ACTORS_EVERY_S)


async def _append(session: ConsoleSession, run_log: RunLog, chunk: LogChunk) -> None:
    """Give complete lines to the run log (big chunks off the UI thread); tell the views."""
    await run_log.add_async(chunk)
    session.post(LogAppended(len(run_log.store)))
    session.maybe_post_metrics()


async def _ticks(session: ConsoleSession) -> None:
    """Every few seconds: the monitor's time-based checks (a stalled run) and fresh derived numbers."""
    while True:
        await asyncio.sleep(TICK_S)
        if session.monitor is not None:
            await asyncio.to_thread(
                session.monitor.tick
            )  # waits for a feed that holds the monitor, off the UI
            session.maybe_post_alerts()


async def _refresh_roles(session: ConsoleSession, poller: TelemetryPoller) -> bool:
    """Name the PIDs holding GPUs by the live run's roles (with the probe only); False when there was
    nothing to ask."""
    job = session.controller.job
    if session.probe is None or job is None or job.is_terminal:
        return False
    with contextlib.suppress(ConsoleError):
        poller.set_roles(await job_roles(session.client, job))
    return True


def _on_snapshot(session: ConsoleSession, snap: ClusterSnapshot) -> None:
    """Hand a snapshot to the fleet, and its dead nodes to the monitor's alerts."""
    session.post(SnapshotArrived(snap))
    if session.monitor is not None:
        for node in snap.dead_nodes:
            session.monitor.on_node_dead(node.node_id, node.death_reason)
        session.maybe_post_alerts()


async def _telemetry(session: ConsoleSession) -> None:
    """1 Hz snapshots while the fleet is visible; nothing at all while it is not."""
    poller = TelemetryPoller(session.client, interval_s=TELEMETRY_INTERVAL_S)
    poller.use_probe(session.probe)
    roles_at = -ROLES_EVERY_S
    lost: str | None = None  # the fault's text while the dashboard is lost
    while True:
        if not session.app.fleet_wanted:
            await asyncio.sleep(0.5)
            continue
        started = time.monotonic()
        poller.watch_job(session.controller.job)  # miles' own GPU streams first, where the run writes them
        if started - roles_at >= ROLES_EVERY_S and await _refresh_roles(session, poller):
            roles_at = started
        try:
            snap = await poller.poll_once()
        except ConsoleError as err:
            if str(err) != lost:  # a new fault, or the same fault in other words: the banner says the latest
                lost = str(err)
                session.post(DashboardLost(lost))
            await asyncio.sleep(2.0)
            continue
        if lost is not None:
            lost = None
            session.post(DashboardBack())
        _on_snapshot(session, snap)
        await poller.wait_next(max(0.1, TELEMETRY_INTERVAL_S - (time.monotonic() - started)))
