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
from textual.screen import ModalScreen
from textual.widgets import Static

from backend.cluster.abort_policy import abort_policy
from backend.cluster.durations import RunTiming, fmt_duration
from backend.cluster.lost_work import LostWork
from backend.cluster.stacks import StacksReport, job_stacks
from backend.errors import ConsoleError
from backend.node_names import NodeNames
from backend.signals.alerts import headline
from backend.signals.dead_run import diagnosis_panel, empty_chart_note
from backend.signals.run_signals import RunSignals
from console import keymap
from console.compare import add_run
from console.messages import (
    AlertsChanged,
    AttemptsKnown,
    BaselineAdded,
    FleetWanted,
    HistoryProgress,
    MetricsArrived,
    RolloutCursor,
    RunStateChanged,
    RunStatus,
    ShowLogLine,
    SnapshotArrived,
)
from console.views.base import ConsoleView
from console.views.run_attempts import RunAttempts
from console.views.run_compare import RunComparison, first_side, panel_text
from console.widgets.abort_modal import AbortActions, AbortModal
from console.widgets.chart_board import ChartBoard
from console.widgets.compare_prompt import ComparePrompt
from console.widgets.gpu_fleet import GpuFleet
from console.widgets.phase_timeline import PhasesScreen
from console.widgets.samples_screen import SamplesScreen
from console.widgets.stacks_screen import StacksScreen

if TYPE_CHECKING:
    from backend.cluster.controller import RunController
    from backend.cluster.leftovers import Leftover
    from backend.cluster.telemetry import ClusterSnapshot
    from backend.signals.alerts import Alert
    from backend.signals.compare import Comparison
    from backend.signals.failures import Diagnosis
    from backend.signals.monitor import MetricsSnapshot

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
COMPACT_BELOW = 100  # columns under which the state line, a comparison's panel and its charts go compact


def _derived(metrics: MetricsSnapshot | None) -> RunSignals:
    return metrics.derived if metrics is not None else RunSignals()


def state_line(
    state: RunStatus | None,
    metrics: MetricsSnapshot | None,
    alerts: Sequence[Alert],
    now: float,
    *,
    compact: bool = False,
    names: NodeNames | None = None,
) -> str:
    """The one-line summary: job, state, elapsed (or, once ended, how long it ran), rollout i/N, ETA while it
    runs, since checkpoint, alerts (a node the cause names by IP or id by its name in `names`)."""
    if state is None:
        return "no run attached — launch one from the plan view (1), or start with --job ID"
    terminal = state.phase in TERMINAL_STATES
    timing = RunTiming(state.started_at, state.ended_at, now)
    d = _derived(metrics)
    progress, eta = _progress_text(d, terminal)
    since = d.checkpoint.since_s
    ckpt = "none" if since is None else fmt_duration(since)  # a dash with "ago" after it said nothing
    worst = "!" if any(a.severity.urgent for a in alerts) else ""
    tail = f"alerts {len(alerts)}{worst}{_said(alerts, state.phase, names)}"
    if compact:
        clock = fmt_duration(timing.elapsed_s)
        eta = f" ETA {eta}" if eta else ""
        return f"{state.job_id} {state.phase} {clock} {progress}{eta} ckpt {ckpt} {tail}"
    return (
        f"job {state.job_id}  {state.phase}  {timing.text(terminal)}  "
        f"{progress}{f'  ETA {eta}' if eta else ''}  ckpt {ckpt}{'' if since is None else ' ago'}  {tail}"
    )


def _said(alerts: Sequence[Alert], phase: str, names: NodeNames | None) -> str:
    """ "  · " and the alerts' headline: a failed run's cause, or a blind chart: never silent."""
    said = headline(alerts, phase)
    said = names.in_text(said) if names is not None else said
    return f"  · {said}" if said else ""


def _progress_text(d: RunSignals, terminal: bool) -> tuple[str, str]:
    """("rollout i/N", ETA): no fraction or ETA past num_rollout, no ETA once the run ended."""
    prog = d.progress
    if prog is None:
        return "rollout —", "" if terminal else fmt_duration(None)
    done, total = prog.rollouts_done, prog.num_rollout
    if prog.past_end:
        return f"rollout {int(done or 0)} (past num_rollout {int(total or 0)})", ""
    if done is not None and total:
        progress = f"rollout {int(done)}/{int(total)}"
    else:
        progress = f"rollout {int(done)}/?" if done else "rollout —"
    return progress, "" if terminal else fmt_duration(prog.eta_s)


class RunView(ConsoleView):
    """State line + fleet + charts; redraws only what changed, and only while shown."""

    SCOPE = "run"
    BINDINGS = keymap.bindings_for("run")
    DEFAULT_CSS = """
    RunView { layout: vertical; }
    RunView #run-state { height: 1; background: $boost; text-style: bold; padding: 0 1; }
    RunView #run-attempts { height: 1; padding: 0 1; color: $text-muted; }
    RunView #run-diagnosis { height: auto; max-height: 12; padding: 0 1; border-left: thick $error;
                             background: $error 10%; }
    RunView GpuFleet { height: auto; min-height: 3; border-top: solid $primary-darken-2; }
    RunView #run-charts { min-height: 6; }
    RunView #run-compare { height: auto; max-height: 10; padding: 0 1; }
    RunView #run-compare.compact { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, clock: Callable[[], float] = time.time, id: str | None = "run-view") -> None:
        super().__init__(id=id)
        self.clock = clock
        self.run_state: RunStatus | None = None
        self.metrics: MetricsSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()
        self.diagnosis: Diagnosis | None = None  # why the run failed: the panel above the charts
        self.snapshot: ClusterSnapshot | None = None
        self.node_names = NodeNames()  # the snapshot's: how the cause and header name a node
        self.history = ""  # "loading history… N lines" while the attached job's log is rebuilt
        self.log_span: tuple[float, float] | None = None  # a replay's first and newest log timestamps
        self._offered: set[str] = set()  # alerts whose `stacks` offer was made
        self._dirty = {"state", "fleet", "charts"}
        self._fleet_wanted = False  # what the app was last told (FleetWanted)
        self.comparison = RunComparison()  # other runs overlaid (`replay A B`, "compare with…")
        self.attempts = RunAttempts(self)  # the run's chain of attempts, R and the previous one for C
        self._compared_previous: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="run-state", markup=False)
        yield Static("", id="run-attempts", markup=False)
        yield Static("", id="run-diagnosis", markup=False)
        yield GpuFleet(id="fleet", max_share=0.6)
        yield ChartBoard()  # configs/charts.toml: one run's charts, or a comparison's

    def on_mount(self) -> None:
        # A replay's GPUs are not this cluster's: no pane for readings that would belong to another run.
        self.query_one(GpuFleet).display = not self.replaying
        self.query_one("#run-attempts", Static).display = False
        self._redraw()
        self.set_interval(1.0, self._tick)

    @property
    def compact(self) -> bool:
        """Under 100 columns (the app's width until the view has been laid out)."""
        return (self.size.width or self.app.size.width) < COMPACT_BELOW

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
        names = message.snapshot.names
        if names != self.node_names:  # the cause's node named as the pane names it
            self.node_names = names
            self._mark("state")
        self._mark("fleet")

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self.metrics = message.payload
        self._mark("charts", "state")

        if isinstance(self.app.screen, PhasesScreen):
            self.app.screen.update_view(self.metrics.phases if self.metrics else None)

    def on_run_state_changed(self, message: RunStateChanged) -> None:
        previous = self.run_state
        self.run_state = message.state
        if previous is not None and previous.job_id != message.state.job_id and not self.replaying:
            # another run (a launch, a new attach): the figures shown were the last run's ("rollout 40/40
            # ETA 0s", "ckpt 11s ago" at 7 s elapsed); they go until this run's own arrive
            self.metrics, self.alerts, self.history, self.diagnosis = None, (), "", None
            self.comparison.clear()  # a comparison belongs to the run it was opened on
            self._mark("charts")
        self.attempts.look_up(message.state.job_id)
        self._mark("state")

    def on_attempts_known(self, message: AttemptsKnown) -> None:
        if self.attempts.known(message):
            line = self.attempts.line()
            widget = self.query_one("#run-attempts", Static)
            widget.update(line)
            widget.display = bool(line)

    def action_resume(self) -> None:
        """R: resume this failed or stopped run (the Plan view on its plan, with the proposed fix)."""
        self.attempts.resume()

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
        self.diagnosis = message.diagnosis
        self._mark("state", "charts")
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
        """Every chart marks the rollout on its own axis (a rollout chart the rollout, a train-step chart its
        first step); a comparison's panel gives each run's values there."""
        self.query_one(ChartBoard).set_mark(message.mark)
        self._mark("charts")

    def on_baseline_added(self, message: BaselineAdded) -> None:
        self.comparison.add(message)
        self._mark("charts")

    def action_compare_clear(self) -> None:
        """X: drop the compared runs; the view's own charts come back."""
        if self.comparison.clear():
            self.notify("comparison cleared", timeout=2)
            self._mark("charts", "state", "fleet")
        else:
            self.notify("no comparison to clear", timeout=2)

    def action_cause_line(self) -> None:
        """Enter: the Logs view at the line the cause was read from (the diagnosis panel's `line`)."""
        found = self.diagnosis
        if found is None:
            self.notify("no cause to go to: the run has not failed", timeout=3)
            return
        self.app.post_message(ShowLogLine(found.cause.seq))
        self.app.call_later(self.app.run_action, "show_view('logs')")

    def action_compare(self) -> None:
        """ "Compare with…": a saved log, a dump dir or a finished job, overlaid on this run's charts. On a
        resumed attempt the first C overlays the attempt before it at once (one key); the next one asks."""
        previous = self.attempts.previous()
        if previous and previous != self._compared_previous:
            self._compared_previous = previous
            self.notify(f"comparing with the attempt before: {previous}", timeout=3)
            self.run_worker(
                add_run(self.console, previous), group="compare", exit_on_error=False, description="compare"
            )
            return

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
                    compact=self.compact,
                    names=self.node_names,
                )
                + self.history
            )
            widget = self.query_one("#run-state", Static)
            if str(widget.content) != text:
                widget.update(text, layout=False)
        if "state" in self._dirty:
            self._draw_diagnosis()
        if "fleet" in self._dirty:
            self.query_one(GpuFleet).update_snapshot(self.snapshot, self.clock())
        if self._dirty & {"charts", "state"}:
            self._draw_charts()
        self._dirty.clear()

    def _draw_charts(self) -> None:
        """One run's charts, or the comparison (its panel above the fleet; under 100 columns a compact panel,
        the charts in two rows and the fleet out of their way)."""
        board = self.query_one(ChartBoard)
        comparison = self._comparison()
        compact = self.compact
        self.query_one(GpuFleet).display = not self.replaying and not (compact and comparison is not None)
        if comparison is None:
            board.draw_run(self.metrics, self._empty_note())
            for panel in self.query("#run-compare"):
                panel.remove()
            return
        board.draw_comparison(comparison, compact)
        panel = self._compare_panel()
        panel.set_class(compact, "compact")  # a row per line, cut at the edge: the charts keep the rows
        panel.update(panel_text(comparison, board.mark, compact=compact))

    def _comparison(self) -> Comparison | None:
        """The comparison of this run with the runs added to it, None without any (or with a bad chart
        config: one notice, and the comparison is dropped)."""
        if not self.comparison.active:
            return None
        replayed = (self.comparison.state or self._phase()) if self.replaying else None
        first = first_side(self.run_state, self.metrics, self.comparison.flags, replayed_state=replayed)
        try:
            return self.comparison.compute(first, self.metrics)
        except ConsoleError as err:
            self.notify(str(err), severity="error")
            self.comparison.clear()
            return None

    def _phase(self) -> str:
        return self.run_state.phase if self.run_state is not None else "—"

    def _compare_panel(self) -> Static:
        found = self.query("#run-compare")
        if found:
            return found.first(Static)
        panel = Static("", id="run-compare", markup=False)
        self.mount(panel, after="#run-state")
        return panel

    def _draw_diagnosis(self) -> None:
        """The diagnosis panel: shown only while the run has a cause (backend.signals.dead_run's rows)."""
        panel = self.query_one("#run-diagnosis", Static)
        found = self.diagnosis
        panel.display = found is not None
        if found is not None:
            text = diagnosis_panel(found, found.up_s, self.node_names).text()
            if str(panel.content) != text:
                panel.update(text)

    def _empty_note(self) -> str:
        """Why an empty chart is empty (backend's words): never "waiting" where nothing will come."""
        phase = self.run_state.phase if self.run_state is not None else ""
        records = len(self.metrics.series.by_key) if self.metrics is not None else 0
        return empty_chart_note(
            replay=self.replaying,
            ended=phase in TERMINAL_STATES,
            metrics=records,
            failed=self.diagnosis is not None,
        )

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

        async def collect(progress: Callable[[str], None]) -> StacksReport:
            progress("reading the job's state…")
            job = await controller.refresh()
            return await job_stacks(controller.client, job, state_dir, ranks=ranks, progress=progress)

        self.app.push_screen(StacksScreen(controller.job.id, collect))

    def action_samples(self) -> None:
        """The GRPO groups of a rollout and their samples, from the run's `dump_details/rollout_data/`."""
        session = getattr(self.app, "session", None)
        shelf = getattr(getattr(session, "monitor", None), "samples", None)
        if shelf is None:
            self.notify(
                "no samples: the run has no --dump-details directory this console reads (rollout_data/)",
                severity="warning",
            )
            return
        cursor = getattr(self.app, "rollout_cursor", None)
        self.app.push_screen(SamplesScreen(shelf, None if cursor is None else str(cursor), self._cursor_to))

    def _cursor_to(self, rollout: int) -> None:
        """The samples screen stepped to `rollout`: the app's cursor follows, and the charts and the log mark
        it when the log has reached that rollout (the file is written before its `perf N` line)."""
        if hasattr(self.app, "rollout_cursor"):
            self.app.rollout_cursor = rollout
        index = getattr(getattr(self.app, "session", None), "rollouts", None)
        if index is not None and rollout in index.rollouts:
            self.app.post_message(RolloutCursor(index.mark(rollout)))

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
