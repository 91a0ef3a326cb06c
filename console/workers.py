"""All of the console's Ray I/O, in Textual workers that only post messages (harlequin's rule).

Workers never touch widgets. Each one talks to backend (RayClient, RunController, TelemetryPoller,
LogStore, MetricsCollector) and posts a console.messages message; the app and the views draw.

- run:       attach to `--job`, else the latest active run, else the latest run; then the controller's
             watch loop (state changes, dashboard lost/back). A launch from the plan view goes
             through the same controller, so its new job is picked up here too.
- logs:      for the attached job, rebuild the history from Ray (progress posted as it goes), then
             follow the live log into the LogStore. Appends are batched (<= 10 posts/s).
- metrics:   the store feeds backend.signals.monitor.RunMonitor (metrics, facts, alerts) through its listener;
             MetricsArrived (series + derived signals) at most 2/s, AlertsChanged when alerts fire.
- telemetry: cluster snapshots at 1 Hz, only while a view that shows them is visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App

from backend.errors import ConsoleError
from console.messages import (
    AlertsChanged,
    DashboardBack,
    DashboardLost,
    HistoryProgress,
    LogAppended,
    MetricsArrived,
    Notice,
    RunStateChanged,
    SnapshotArrived,
)

if TYPE_CHECKING:  # backend's I/O stack is imported after the first frame (see start_workers)
    from backend.cluster.controller import RunController, RunEvent
    from backend.cluster.dashboard import JobInfo
    from backend.signals.logs import LogStore
    from backend.signals.monitor import RunMonitor
    from backend.signals.replay import RolloutIndex
    from backend.signals.series import SeriesSet

TELEMETRY_INTERVAL_S = 1.0
LOG_FLUSH_S = 0.1
METRICS_EVERY_S = 0.5
HISTORY_BATCH_LINES = 20_000
TICK_S = 5.0


@dataclass(frozen=True)
class RunStatus:
    """What the views show about the run (from the controller's state event)."""

    job_id: str
    state: str
    started_at: float | None = None
    ended_at: float | None = None
    message: str = ""
    simulated: bool = False

    @property
    def label(self) -> str:
        return f"{self.job_id} {self.state}"


def run_status(event: RunEvent) -> RunStatus | None:
    job = event.job
    state = event.state.value if event.state is not None else (job.status if job else "?")
    if job is None:
        return RunStatus(event.text.removeprefix("submitting ") or "?", state)
    meta = job.metadata or {}
    return RunStatus(job.id, state, job.start_time / 1000.0 if job.start_time else None,
                     job.end_time / 1000.0 if job.end_time else None, job.message or "",
                     bool(meta.get("simulated")) or "simtrainer" in (job.entrypoint or ""))


@dataclass(frozen=True)
class MetricsView:
    """The MetricsArrived payload: backend's series and its derived-signals block, as of now."""

    series: SeriesSet
    derived: dict[str, Any]


class Runtime:
    """The backend objects one console session uses; the app holds it as `app.runtime`."""

    def __init__(self, app: App[Any]) -> None:
        from backend.cluster.controller import RunController
        from backend.cluster.dashboard import RayClient

        settings = app.settings  # type: ignore[attr-defined]
        self.app = app
        token = settings.token.get_secret_value() if settings.token else None
        self.client = RayClient(settings.address, token)
        controller = getattr(app, "controller", None)
        if controller is None:
            controller = RunController(self.client, state_dir=settings.state_dir, readonly=settings.readonly)
            app.controller = controller  # type: ignore[attr-defined]
        self.controller: RunController = controller
        self.spool_dir = Path(settings.state_dir) / "logs"
        self.store: LogStore | None = None
        self.monitor: RunMonitor | None = None
        self.rollouts: RolloutIndex | None = None
        self.job_id: str | None = None
        self._alerts_posted = 0
        self._metrics_seen = 0
        self._metrics_posted_at = 0.0

    def post(self, message: Any) -> None:
        if self.app.is_running:  # nothing is posted into an app that is shutting down
            self.app.post_message(message)

    def new_store(self, job_id: str) -> LogStore:
        """A fresh store + collector for `job_id`, handed to the logs view."""
        from backend.signals.logs import LogStore
        from backend.signals.monitor import RunMonitor

        if self.store is not None:
            self.store.close()
        self.store = LogStore(self.spool_dir, run_id=job_id)
        try:
            self.monitor = RunMonitor()
        except ConsoleError as err:  # e.g. a broken alert rules file: say so, keep the console working
            self.post(Notice(f"metrics and alerts are off: {err}", "warning"))
            self.monitor = None
        if self.monitor is not None:
            self.store.subscribe(self.monitor.on_log_lines)
        from backend.signals.replay import RolloutIndex

        self.rollouts = RolloutIndex()  # the `[` / `]` rollout cursor works on a live run's log too
        self.store.subscribe(self.rollouts.on_lines)
        self.job_id = job_id
        self._metrics_seen = 0
        self._alerts_posted = 0
        from console.views.logs import LogsView

        for view in self.app.query(LogsView):
            view.set_store(self.store)
        return self.store

    def maybe_post_metrics(self, force: bool = False) -> None:
        monitor = self.monitor
        if monitor is None:
            return
        collector = monitor.collector
        seen = sum(collector.records.values())
        now = time.monotonic()
        if seen != self._metrics_seen and (force or now - self._metrics_posted_at >= METRICS_EVERY_S):
            self._metrics_seen = seen
            self._metrics_posted_at = now
            from backend.signals.derived import derive

            derived = derive(collector, monitor.facts, monitor.telemetry, monitor.miles_now())
            self.post(MetricsArrived(MetricsView(collector.series, derived)))
        self.maybe_post_alerts()

    def maybe_post_alerts(self) -> None:
        monitor = self.monitor
        if monitor is not None and len(monitor.alerts.alerts) != self._alerts_posted:
            self._alerts_posted = len(monitor.alerts.alerts)
            self.post(AlertsChanged(monitor.alerts.alerts))


def wants_telemetry(app: App[Any]) -> bool:
    """True while some visible view draws cluster snapshots (the run view's fleet)."""
    from console.views.run import RunView

    if not app.is_running or len(app.screen_stack) == 0:
        return False
    return any(view.wants_telemetry() for view in app.query(RunView))


def start_workers(app: App[Any]) -> None:
    """Called by the app on mount: the backend objects and workers start right after the first frame,
    so importing the I/O stack (httpx, the run controller, the log store) never delays it."""
    app.call_after_refresh(_start, app)


def _start(app: App[Any]) -> Runtime:
    runtime = Runtime(app)
    app.runtime = runtime  # type: ignore[attr-defined]
    runtime.controller.subscribe(lambda event: _on_run_event(runtime, event))
    app.run_worker(_telemetry(runtime), group="telemetry", exclusive=True, exit_on_error=False,
                   description="cluster telemetry")
    app.run_worker(_run(runtime, getattr(app, "job", None)), group="run", exclusive=True, exit_on_error=False,
                   description="attach and watch the run")
    app.run_worker(_ticks(runtime), group="ticks", exclusive=True, exit_on_error=False,
                   description="time-based alerts and derived signals")
    return runtime


async def _on_run_event(rt: Runtime, event: RunEvent) -> None:
    if event.kind == "state":
        status = run_status(event)
        if status is not None:
            rt.post(RunStateChanged(status))
        if event.job is not None and rt.monitor is not None and event.job.id == rt.job_id:
            rt.monitor.on_job_status(event.job.status, event.job.message)
            rt.maybe_post_alerts()
        if event.job is not None and event.job.id != rt.job_id:
            # claimed here, before the worker runs: one log worker (and one store) per job, even when
            # several state events of a new job arrive before its worker has started
            rt.job_id = event.job.id
            rt.app.run_worker(_logs(rt, event.job), group="logs", exclusive=True, exit_on_error=False,
                              description=f"log of {event.job.id}")
    elif event.kind == "notice" and event.text:
        rt.post(Notice(event.text))
    elif event.kind == "error":
        rt.post(DashboardLost(event.text))
    elif event.kind == "recovered":
        rt.post(DashboardBack())


async def _run(rt: Runtime, job: str | None) -> None:
    """Attach, then watch forever (also across a later launch); reconnects on its own."""
    from backend.cluster.controller import NoRunFound
    from backend.cluster.job_identity import active_runs

    controller = rt.controller
    while controller.job is None:
        try:
            target = job
            if target is None:
                active = active_runs(await rt.client.list_jobs())
                target = active[0].id if active else None
            await controller.attach(target)
        except NoRunFound:
            rt.post(Notice("no training run on the cluster yet: plan one and press L to launch"))
            while controller.job is None:
                await asyncio.sleep(1.0)  # a launch from the plan view sets the job
        except ConsoleError as err:
            rt.post(DashboardLost(str(err)))
            await asyncio.sleep(3.0)
    rt.post(DashboardBack())
    while True:
        with contextlib.suppress(ConsoleError):
            await controller.watch(until_terminal=False)
        await asyncio.sleep(controller.poll_s)


async def _logs(rt: Runtime, job: JobInfo) -> None:
    """Rebuild `job`'s history into a fresh LogStore (with progress), then follow it live."""
    store = rt.new_store(job.id)
    rt.post(HistoryProgress(job.id, 0, done=False))
    delivered = 0
    try:
        batch: list[str] = []
        async for line in rt.client.read_log(job.id):
            batch.append(line)
            if len(batch) >= HISTORY_BATCH_LINES:
                delivered += await _append(rt, store, batch, threaded=True)
                batch = []
                rt.post(HistoryProgress(job.id, delivered, done=False))
        delivered += await _append(rt, store, batch, threaded=True)
    except ConsoleError as err:
        rt.post(Notice(f"log history of {job.id} incomplete: {err}", "warning"))
    rt.post(HistoryProgress(job.id, delivered, done=True))
    rt.maybe_post_metrics(force=True)
    if job.is_terminal:
        return
    batch, last = [], time.monotonic()
    try:
        async for line in rt.client.follow_log(job.id, start_offset=delivered):
            batch.append(line)
            now = time.monotonic()
            if now - last >= LOG_FLUSH_S or len(batch) >= HISTORY_BATCH_LINES:
                await _append(rt, store, batch, threaded=len(batch) > 2000)
                batch, last = [], now
        await _append(rt, store, batch, threaded=False)
    except ConsoleError as err:
        await _append(rt, store, batch, threaded=False)
        rt.post(Notice(f"log follow of {job.id} stopped: {err}", "warning"))
    rt.maybe_post_metrics(force=True)


async def _append(rt: Runtime, store: LogStore, lines: list[str], *, threaded: bool) -> int:
    """Give complete lines to the store (big batches off the UI thread); tell the views."""
    if not lines:
        return 0
    chunk = "\n".join(lines) + "\n"
    if threaded:
        await asyncio.to_thread(store.append, chunk)
    else:
        store.append(chunk)
    rt.post(LogAppended(len(store)))
    rt.maybe_post_metrics()
    return len(lines)


async def _ticks(rt: Runtime) -> None:
    """Every few seconds: the monitor's time-based checks (a stalled run) and fresh derived numbers."""
    while True:
        await asyncio.sleep(TICK_S)
        if rt.monitor is not None:
            rt.monitor.tick()
            rt.maybe_post_alerts()


async def _telemetry(rt: Runtime) -> None:
    """1 Hz snapshots while the fleet is visible; nothing at all while it is not."""
    from backend.cluster.telemetry import TelemetryPoller

    poller = TelemetryPoller(rt.client, interval_s=TELEMETRY_INTERVAL_S)
    lost = False
    while True:
        if not wants_telemetry(rt.app):
            await asyncio.sleep(0.5)
            continue
        started = time.monotonic()
        try:
            snap = await poller.poll_once()
        except ConsoleError as err:
            if not lost:
                lost = True
                rt.post(DashboardLost(str(err)))
            await asyncio.sleep(2.0)
            continue
        if lost:
            lost = False
            rt.post(DashboardBack())
        rt.post(SnapshotArrived(snap))
        if rt.monitor is not None:
            for node in snap.dead_nodes:
                rt.monitor.on_node_dead(node.node_id, node.death_reason)
            rt.maybe_post_alerts()
        await asyncio.sleep(max(0.1, TELEMETRY_INTERVAL_S - (time.monotonic() - started)))
