"""The run view: a state line, the GPU fleet, and the throughput / timing / KL charts.

It draws what backend computed: the run controller's state, telemetry snapshots, metric series
and derived signals, alerts. Nothing is recomputed here. Off screen it does nothing: messages only
store the latest payload and mark the view dirty; the redraw happens when the view is shown.
The telemetry worker polls only while `wants_telemetry()` is true (the view is visible). A replay has no
fleet pane (this cluster's GPUs are not the replayed run's) and its clock is its log's timestamps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Static

from backend.cluster.abort_policy import abort_policy
from backend.cluster.durations import RunTiming, fmt_duration
from backend.cluster.lost_work import LostWork
from backend.cluster.stacks import StacksReport, job_stacks
from backend.signals.alerts import headline
from backend.signals.run_signals import RunSignals
from backend.signals.sources import chart_source
from console import keymap
from console.compare import add_run
from console.messages import (
    AlertsChanged,
    BaselineAdded,
    FleetWanted,
    HistoryProgress,
    MetricsArrived,
    RolloutCursor,
    RunStateChanged,
    RunStatus,
    SnapshotArrived,
)
from console.views.base import ConsoleView
from console.views.run_compare import RunComparison
from console.widgets.abort_modal import AbortActions, AbortModal
from console.widgets.charts import ChartSeries, LineChart
from console.widgets.compare_prompt import ComparePrompt
from console.widgets.gpu_fleet import GpuFleet
from console.widgets.phase_timeline import PhasesScreen
from console.widgets.stacks_screen import StacksScreen

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.leftovers import Leftover
    from backend.cluster.telemetry import ClusterSnapshot
    from backend.signals.alerts import Alert
    from backend.signals.monitor import MetricsSnapshot

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})

# Which series each chart draws (metric keys as miles / backend.signals.derived name them).
THROUGHPUT = (
    ("derived/cluster_tokens_per_sec", "cluster tok/s", "cyan", False),
    ("perf/tokens_per_gpu_per_sec", "per GPU", "orange", True),
)
TIMING = (("perf/rollout_time", "rollout s", "cyan", False), ("perf/train_time", "train s", "magenta", False))
KL = (
    ("train/ppo_kl", "ppo_kl", "cyan", False),
    ("train/train_rollout_kl", "train/rollout kl", "magenta", False),
    ("train/train_rollout_logprob_abs_diff", "logprob |diff|", "orange", False),
    ("rollout/raw_reward", "raw reward", "green", True),
)


def series_points(metrics: MetricsSnapshot | None, key: str) -> tuple[tuple[float, float], ...]:
    """The finite (step, value) points of `key` in the snapshot the workers posted."""
    series = metrics.series.get(key) if metrics is not None else None
    return series.finite_points() if series is not None else ()


def _derived(metrics: MetricsSnapshot | None) -> RunSignals:
    return metrics.derived if metrics is not None else RunSignals()


def state_line(
    state: RunStatus | None,
    metrics: MetricsSnapshot | None,
    alerts: Sequence[Alert],
    now: float,
    *,
    compact: bool = False,
) -> str:
    """The one-line summary: job, state, elapsed (or, once ended, how long it ran), rollout i/N, ETA while it
    runs, since checkpoint, alerts."""
    if state is None:
        return "no run attached — launch one from the plan view (1), or start with --job ID"
    terminal = state.phase in TERMINAL_STATES
    timing = RunTiming(state.started_at, state.ended_at, now)
    d = _derived(metrics)
    prog = d.progress
    done, total = (prog.rollouts_done, prog.num_rollout) if prog is not None else (None, None)
    past = prog is not None and prog.past_end  # no fraction and no ETA to give
    if past:
        progress = f"rollout {int(done or 0)} (past num_rollout {int(total or 0)})"
    elif done is not None and total:
        progress = f"rollout {int(done)}/{int(total)}"
    else:
        progress = f"rollout {int(done)}/?" if done else "rollout —"
    eta = "" if terminal or past else fmt_duration(prog.eta_s if prog is not None else None)
    since = d.checkpoint.since_s
    ckpt = "none" if since is None else fmt_duration(since)  # a dash with "ago" after it said nothing
    n_alerts = len(alerts)
    worst = ""
    if n_alerts:
        worst = "!" if any(a.severity.urgent for a in alerts) else ""

    said = headline(alerts, state.phase)  # a failed run's cause, or a blind chart: never silent
    said = f"  · {said}" if said else ""
    if compact:
        clock = fmt_duration(timing.elapsed_s)
        return (
            f"{state.job_id} {state.phase} {clock} {progress}{f' ETA {eta}' if eta else ''} ckpt {ckpt} "
            f"alerts {n_alerts}{worst}{said}"
        )
    return (
        f"job {state.job_id}  {state.phase}  {timing.text(terminal)}  "
        f"{progress}{f'  ETA {eta}' if eta else ''}  ckpt {ckpt}{'' if since is None else ' ago'}  "
        f"alerts {n_alerts}{worst}{said}"
    )


class RunView(ConsoleView):
    """State line + fleet + charts; redraws only what changed, and only while shown."""

    SCOPE = "run"
    BINDINGS = keymap.bindings_for("run")
    DEFAULT_CSS = """
    RunView { layout: vertical; }
    RunView #run-state { height: 1; background: $boost; text-style: bold; padding: 0 1; }
    RunView GpuFleet { height: auto; min-height: 3; border-top: solid $primary-darken-2; }
    RunView #run-charts { height: 1fr; min-height: 6; }
    RunView LineChart { width: 1fr; margin-right: 1; }
    """

    def __init__(self, *, clock: Callable[[], float] = time.time, id: str | None = "run-view") -> None:
        super().__init__(id=id)
        self.clock = clock
        self.run_state: RunStatus | None = None
        self.metrics: MetricsSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()
        self.snapshot: ClusterSnapshot | None = None
        self.history = ""  # "loading history… N lines" while the attached job's log is rebuilt
        self.log_span: tuple[float, float] | None = None  # a replay's first and newest log timestamps
        self._offered: set[str] = set()  # alerts whose `stacks` offer was made
        self._dirty = {"state", "fleet", "charts"}
        self._fleet_wanted = False  # what the app was last told (FleetWanted)
        self.comparison = RunComparison(self)  # other runs overlaid (`replay A B`, "compare with…")

    def compose(self) -> ComposeResult:
        yield Static("", id="run-state", markup=False)
        yield GpuFleet(id="fleet", max_share=0.6)
        with Horizontal(id="run-charts"):
            yield LineChart(
                "throughput", x_label="rollout", y_label="tok/s", right_label="per GPU", id="chart-throughput"
            )
            yield LineChart("rollout vs train time (s)", x_label="rollout", id="chart-time")
            yield LineChart("KL / reward", x_label="step", right_label="reward", id="chart-kl")

    def on_mount(self) -> None:
        # A replay's GPUs are not this cluster's: no pane for readings that would belong to another run.
        self.query_one(GpuFleet).display = not self.replaying
        self._redraw()
        self.set_interval(1.0, self._tick)

    @property
    def replaying(self) -> bool:
        return self.console.replay is not None

    @property
    def shown(self) -> bool:
        """Visible now: mounted, displayed (not a hidden pane of the switcher), on the active screen or under
        the modals stacked on it (a modal draws the screen below it, so what shows there must stay true)."""
        if not (self.is_mounted and self.display and self.is_on_screen):
            return False
        stack = self.app.screen_stack
        if self.screen not in stack:
            return False
        above = stack[stack.index(self.screen) + 1 :]
        return all(isinstance(s, ModalScreen) for s in above)

    def _say_if_fleet_wanted(self) -> None:
        """Tell the app (for the telemetry worker) when the fleet starts or stops showing."""
        shown = self.shown
        if shown != self._fleet_wanted:
            self._fleet_wanted = shown
            self.post_message(FleetWanted(shown))

    def on_show(self) -> None:
        self._say_if_fleet_wanted()

    def on_hide(self) -> None:
        self._say_if_fleet_wanted()

    def view_shown(self) -> None:
        self._say_if_fleet_wanted()
        self._redraw()

    # ------------------------------------------------------------ messages (store, then draw if shown)
    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.snapshot = message.snapshot
        self._mark("fleet")

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self.metrics = message.payload
        self._mark("charts", "state")

        if isinstance(self.app.screen, PhasesScreen):
            self.app.screen.update_view(self.metrics.phases if self.metrics else None)

    def on_run_state_changed(self, message: RunStateChanged) -> None:
        self.run_state = message.state
        self._mark("state")

    def on_history_progress(self, message: HistoryProgress) -> None:
        self.history = "" if message.done else f"  · loading history {message.lines:,} lines…"
        self.log_span = message.log_span or self.log_span
        self._mark("state")

    def _shown_state(self) -> RunStatus | None:
        """The run's state as the state line tells it; a replay's clock is its log's (first to newest
        timestamp), never the wall clock of the replay."""
        state = self.run_state
        if state is None or not self.replaying:
            return state
        started, ended = self.log_span or (None, None)
        return replace(state, started_at=started, ended_at=ended)

    def on_alerts_changed(self, message: AlertsChanged) -> None:
        self.alerts = message.alerts
        self._mark("state")
        for alert in self.alerts:
            if alert.action == "stacks" and alert.id not in self._offered:
                self._offered.add(alert.id)
                key = keymap.effective_key(
                    next(s for s in keymap.specs("run") if s.id == "run.stacks"),
                    getattr(self.app, "keymap_overrides", {}) or {},
                )
                self.notify(
                    f"{alert.message} — press {key} in the Run view for every rank's stack",
                    severity="error",
                    timeout=30,
                )

    def on_rollout_cursor(self, message: RolloutCursor) -> None:
        """The rollout charts mark the rollout, the KL chart (train steps) its first step."""
        mark = message.mark
        self.query_one("#chart-throughput", LineChart).set_marker(mark.n)
        self.query_one("#chart-time", LineChart).set_marker(mark.n)
        self.query_one("#chart-kl", LineChart).set_marker(mark.first_step)
        self.comparison.cursor(mark)

    def on_baseline_added(self, message: BaselineAdded) -> None:
        self.comparison.add(message)
        self._mark("charts")

    def action_compare(self) -> None:
        """ "Compare with…": a saved log, a dump dir or a finished job, overlaid on this run's charts."""

        def chosen(target: str | None) -> None:
            if target:
                self.run_worker(
                    add_run(self.console, target),
                    group="compare",
                    exit_on_error=False,
                    description=f"compare with {target}",
                )

        self.app.push_screen(ComparePrompt(), chosen)

    def _mark(self, *parts: str) -> None:
        self._dirty.update(parts)
        if self.shown:
            self._redraw()

    def _tick(self) -> None:
        """Time moves on its own: a run's elapsed time and the age of the GPU readings (a node goes stale
        without any new message), so a visible view redraws both once a second."""
        self._say_if_fleet_wanted()  # a screen pushed over the view hides it without a Hide of its own
        if not self.shown:
            return
        if self.run_state is not None:
            self._dirty.add("state")
        if self.snapshot is not None:
            self._dirty.add("fleet")
        if self._dirty:
            self._redraw()

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        if "state" in self._dirty:
            text = (
                state_line(
                    self._shown_state(),
                    self.metrics,
                    self.alerts,
                    self.clock(),
                    compact=self.size.width < 100,
                )
                + self.history
            )
            widget = self.query_one("#run-state", Static)
            if str(widget.content) != text:
                widget.update(text, layout=False)
        if "fleet" in self._dirty:
            self.query_one(GpuFleet).update_snapshot(self.snapshot, self.clock())
        compared = bool(self._dirty & {"charts", "state"}) and self.comparison.draw()
        if "charts" in self._dirty and not compared:
            sources = self.metrics.sources if self.metrics is not None else {}
            for chart_id, spec in (
                ("#chart-throughput", THROUGHPUT),
                ("#chart-time", TIMING),
                ("#chart-kl", KL),
            ):
                chart = self.query_one(chart_id, LineChart)
                chart.set_series(
                    [
                        ChartSeries(label, series_points(self.metrics, key), color, right)
                        for key, label, color, right in spec
                    ]
                )
                source = chart_source(sources, [key for key, *_ in spec]) if sources else ""
                base = chart.title.split(" · from ")[0]
                chart.set_title(f"{base} · from {source}" if source else base)
        self._dirty.clear()

    # ------------------------------------------------------------ stacks and phases
    def action_stacks(self) -> None:
        """Every rank's Python stack, grouped (read-only: py-spy dumps, nothing is signalled)."""
        controller = getattr(self.app, "controller", None)
        if controller is None or controller.job is None:
            self.notify("no run attached: no stacks to dump", severity="warning")
            return
        if controller.state is not None and controller.state.terminal:
            self.notify(
                f"run {controller.job.id} ended {controller.state.value}: no process left to dump",
                severity="warning",
            )
            return
        session = getattr(self.app, "session", None)
        monitor = getattr(session, "monitor", None)
        ranks = dict(getattr(monitor, "process_ranks", None) or {})
        state_dir = self.console.settings.state_dir

        async def collect() -> StacksReport:
            job = await controller.refresh()
            return await job_stacks(controller.client, job, state_dir, ranks=ranks)

        self.app.push_screen(StacksScreen(controller.job.id, collect))

    def action_phases(self) -> None:
        """The per-rank phase timeline over the whole terminal."""
        self.app.push_screen(PhasesScreen(self.metrics.phases if self.metrics else None, self.clock))

    # ------------------------------------------------------------ abort
    def action_abort(self) -> None:
        if self.refuse_if_readonly("abort"):
            return
        controller = getattr(self.app, "controller", None)
        if controller is None or controller.job is None:
            self.notify("no run attached: nothing to abort", severity="warning")
            return
        if controller.state is not None and controller.state.terminal:
            self.notify(f"run {controller.job.id} already ended {controller.state.value}", severity="warning")
            return
        self.app.push_screen(AbortModal(controller.job.id, self.loss_text(), abort_actions(controller)))

    def loss_text(self) -> str:
        """What an abort loses (backend.cluster.lost_work), from the run monitor's derived numbers."""
        d = _derived(self.metrics)
        return LostWork(
            since_checkpoint_s=d.checkpoint.since_s,
            rollouts_done=d.progress.rollouts_done if d.progress is not None else None,
            last_checkpoint_rollout=d.checkpoint.last_iteration,
            checkpoints_saved=d.checkpoint.count,
            gpus=d.throughput.rollout_gpus if d.throughput is not None else None,
        ).text()


def abort_actions(controller: RunController) -> AbortActions:
    """Bind the modal's steps to the run controller, timed by backend.cluster.abort_policy (as the CLI is)."""

    async def stop() -> bool:
        outcome = await controller.abort()
        try:
            job = await controller.wait_terminal(timeout_s=abort_policy(outcome.job).wait_s(forced=False))
        except TimeoutError:
            return False
        return job.is_terminal

    async def force() -> bool:
        await controller.force_stop()
        assert controller.job is not None
        try:
            job = await controller.wait_terminal(timeout_s=abort_policy(controller.job).wait_s(forced=True))
        except TimeoutError:
            return False
        return job.is_terminal

    async def check_nodes() -> list[str]:
        return [label for _, label in await controller.leftover_nodes()]

    async def cleanup(items: Sequence[Leftover]) -> str:
        results = await controller.cleanup(list(items))
        killed = sum(1 for r in results if r.action == "killed")
        skipped = [f"pid {r.pid}: {r.reason}" for r in results if r.action != "killed"]
        return f"killed {killed} of {len(items)} leftover process(es)" + (
            "; " + "; ".join(skipped[:4]) if skipped else ""
        )

    return AbortActions(stop, force, check_nodes, controller.leftovers, cleanup)
