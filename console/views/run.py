"""The run view: a state line, the GPU fleet, and the throughput / timing / KL charts.

It draws what backend computed: the run controller's state, telemetry snapshots, metric series
and derived signals, alerts. Nothing is recomputed here. Off screen it does nothing: messages only
store the latest payload and mark the view dirty; the redraw happens when the view is shown.
The telemetry worker polls only while `wants_telemetry()` is true (the view is visible).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from console import keymap
from console.messages import (
    AlertsChanged,
    HistoryProgress,
    MetricsArrived,
    RolloutCursor,
    RunStateChanged,
    RunStatus,
    SnapshotArrived,
)
from console.views.base import ConsoleView
from console.widgets.abort_modal import AbortActions, AbortModal
from console.widgets.charts import LineChart, Series
from console.widgets.gpu_fleet import GpuFleet

if TYPE_CHECKING:
    from backend.cluster.telemetry import ClusterSnapshot
    from backend.signals.alerts import Alert
    from backend.signals.monitor import MetricsSnapshot

# Which series each chart draws (metric keys as miles / backend.signals.derived name them).
THROUGHPUT = (("derived/cluster_tokens_per_sec", "cluster tok/s", "cyan", False),
              ("perf/tokens_per_gpu_per_sec", "per GPU", "orange", True))
TIMING = (("perf/rollout_time", "rollout s", "cyan", False),
          ("perf/train_time", "train s", "magenta", False))
KL = (("train/ppo_kl", "ppo_kl", "cyan", False),
      ("train/train_rollout_kl", "train/rollout kl", "magenta", False),
      ("train/train_rollout_logprob_abs_diff", "logprob |diff|", "orange", False),
      ("rollout/raw_reward", "raw reward", "green", True))


def series_points(metrics: MetricsSnapshot | None, key: str) -> tuple[tuple[float, float], ...]:
    """The finite (step, value) points of `key` in the snapshot the workers posted."""
    series = metrics.series.get(key) if metrics is not None else None
    return series.finite_points() if series is not None else ()


def _derived(metrics: MetricsSnapshot | None) -> dict[str, Any]:
    return metrics.derived if metrics is not None else {}


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "—"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def state_line(state: RunStatus | None, metrics: MetricsSnapshot | None, alerts: Sequence[Alert], now: float, *,
               compact: bool = False) -> str:
    """The one-line summary: job, state, elapsed, rollout i/N, ETA, since checkpoint, alerts."""
    if state is None:
        return "no run attached — launch one from the plan view (1), or start with --job ID"
    job, status, started = state.job_id, state.state, state.started_at
    elapsed = ((state.ended_at or now) - started) if started is not None else None
    d = _derived(metrics)
    prog = d.get("progress") or {}
    done, total = prog.get("rollouts_done"), prog.get("num_rollout")
    if done is not None and total:
        progress = f"rollout {int(done)}/{int(total)}"
    else:
        progress = f"rollout {int(done)}/?" if done else "rollout —"
    eta = fmt_duration(prog.get("eta_s"))
    ckpt = fmt_duration((d.get("checkpoint") or {}).get("since_s"))
    n_alerts = len(alerts)
    worst = ""
    if n_alerts:
        sev = {a.severity for a in alerts}
        worst = "!" if sev & {"critical", "error"} else ""
    from backend.signals.alerts import headline

    said = headline(alerts, status)  # a failed run's cause, or a blind chart: never silent
    said = f"  · {said}" if said else ""
    if compact:
        return (f"{job} {status} {fmt_duration(elapsed)} {progress} ETA {eta} ckpt {ckpt} "
                f"alerts {n_alerts}{worst}{said}")
    return (f"job {job}  {status}  elapsed {fmt_duration(elapsed)}  {progress}  ETA {eta}  "
            f"ckpt {ckpt} ago  alerts {n_alerts}{worst}{said}")


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
        self._dirty = {"state", "fleet", "charts"}

    def compose(self) -> ComposeResult:
        yield Static("", id="run-state", markup=False)
        yield GpuFleet(id="fleet", max_share=0.6)
        with Horizontal(id="run-charts"):
            yield LineChart("throughput", x_label="rollout", y_label="tok/s", right_label="per GPU",
                            id="chart-throughput")
            yield LineChart("rollout vs train time (s)", x_label="rollout", id="chart-time")
            yield LineChart("KL / reward", x_label="step", right_label="reward", id="chart-kl")

    def on_mount(self) -> None:
        self._redraw()
        self.set_interval(1.0, self._tick)

    @property
    def shown(self) -> bool:
        """Visible now: mounted, displayed (not a hidden pane of the switcher), on the active screen."""
        return self.is_mounted and self.display and self.screen is self.app.screen and self.is_on_screen

    def wants_telemetry(self) -> bool:
        return self.shown

    def view_shown(self) -> None:
        self._redraw()

    # ------------------------------------------------------------ messages (store, then draw if shown)
    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.snapshot = message.snapshot
        self._mark("fleet")

    def on_metrics_arrived(self, message: MetricsArrived) -> None:
        self.metrics = message.payload
        self._mark("charts", "state")

    def on_run_state_changed(self, message: RunStateChanged) -> None:
        self.run_state = message.state
        self._mark("state")

    def on_history_progress(self, message: HistoryProgress) -> None:
        self.history = "" if message.done else f"  · loading history {message.lines:,} lines…"
        self._mark("state")

    def on_alerts_changed(self, message: AlertsChanged) -> None:
        self.alerts = message.alerts
        self._mark("state")

    def on_rollout_cursor(self, message: RolloutCursor) -> None:
        """The rollout charts mark the rollout, the KL chart (train steps) its first step."""
        mark = message.mark
        self.query_one("#chart-throughput", LineChart).set_marker(mark.n)
        self.query_one("#chart-time", LineChart).set_marker(mark.n)
        self.query_one("#chart-kl", LineChart).set_marker(mark.first_step)

    def _mark(self, *parts: str) -> None:
        self._dirty.update(parts)
        if self.shown:
            self._redraw()

    def _tick(self) -> None:
        """Elapsed time moves on its own; only a live, visible run needs the 1 Hz state refresh."""
        if self.run_state is not None and self.shown:
            self._dirty.add("state")
            self._redraw()

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        if "state" in self._dirty:
            text = state_line(self.run_state, self.metrics, self.alerts, self.clock(),
                              compact=self.size.width < 100) + self.history
            widget = self.query_one("#run-state", Static)
            if str(widget.content) != text:
                widget.update(text, layout=False)
        if "fleet" in self._dirty:
            self.query_one(GpuFleet).update_snapshot(self.snapshot)
        if "charts" in self._dirty:
            for chart_id, spec in (("#chart-throughput", THROUGHPUT), ("#chart-time", TIMING), ("#chart-kl", KL)):
                self.query_one(chart_id, LineChart).set_series(
                    [Series(label, series_points(self.metrics, key), color, right)
                     for key, label, color, right in spec])
        self._dirty.clear()

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
        """What an abort loses, from backend's derived signals (time and steps since the checkpoint)."""
        d = _derived(self.metrics)
        ckpt, prog = d.get("checkpoint") or {}, d.get("progress") or {}
        since = ckpt.get("since_s")
        gpus = (d.get("throughput") or {}).get("rollout_gpus")
        steps = None
        if ckpt.get("last_iteration") is not None and prog.get("rollouts_done") is not None:
            steps = max(0, int(prog["rollouts_done"]) - int(ckpt["last_iteration"]) - 1)
        parts = []
        if since is not None:
            parts.append(f"{fmt_duration(since)} of training since the last checkpoint")
        if steps is not None:
            parts.append(f"{steps} rollout(s)")
        if since is not None and gpus:
            parts.append(f"≈{since * gpus / 3600:.1f} GPU-hours")
        if not parts:
            if ckpt.get("count") == 0:
                return "No checkpoint has been saved yet: everything this run trained will be lost."
            return "Progress since the last checkpoint will be lost (its time is not known yet)."
        return "Will be lost: " + ", ".join(parts) + "."


def abort_actions(controller: Any, *, grace_extra_s: float = 20.0) -> AbortActions:
    """Bind the modal's steps to backend.cluster.controller.RunController."""
    from backend.cluster.controller import stop_settings

    async def stop() -> bool:
        outcome = await controller.abort()
        _, wait = stop_settings(outcome.job)
        try:
            job = await controller.wait_terminal(timeout_s=wait + grace_extra_s)
        except TimeoutError:
            return False
        return bool(job.is_terminal)

    async def force() -> bool:
        await controller.force_stop()
        try:
            job = await controller.wait_terminal(timeout_s=60.0)
        except TimeoutError:
            return False
        return bool(job.is_terminal)

    async def leftovers() -> list[Any]:
        return list(await controller.leftovers())

    async def cleanup(items: Sequence[Any]) -> str:
        results = await controller.cleanup(list(items))
        killed = sum(1 for r in results if r.get("action") == "killed")
        return f"killed {killed} of {len(items)} leftover process(es)"

    return AbortActions(stop, force, leftovers, cleanup)
