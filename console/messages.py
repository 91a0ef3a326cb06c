"""Messages workers post to the app and views handle (the worker -> UI half of the threading rule).

Workers never touch widgets: they `post_message` one of these (thread-safe) to the app, and only
`on_*` handlers change what is drawn. The app handles what it needs (banner, state line) and then
fans every `ConsoleMessage` out to each mounted view, so a view just defines e.g.
`on_snapshot_arrived`. They do not bubble (a view receiving one never sends it back up). Payloads are
typed values a worker thread no longer changes: backend's frozen models and dataclasses, or copies of them.
Names are a contract with console/workers.py — add, don't rename.

Backend types are imported for the checker only: this module is on the first frame's import path, and
backend's telemetry and signals modules are imported after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from backend.severity import Severity

if TYPE_CHECKING:
    from backend.cluster.resume import Attempt, ResumePlan
    from backend.cluster.telemetry import ClusterSnapshot
    from backend.plan.finding import Finding
    from backend.signals.alerts import Alert
    from backend.signals.compare import RunSide
    from backend.signals.failures import Diagnosis
    from backend.signals.launch_flags import LaunchFlags
    from backend.signals.monitor import MetricsSnapshot
    from backend.signals.replay import RolloutMark
    from backend.signals.store import LogStore


@dataclass(frozen=True)
class RunStatus:
    """What the views show about the run: the controller's state event, times in epoch seconds."""

    job_id: str
    phase: str  # the controller's RunPhase value, or "REPLAY ..." for a replayed run
    started_at: float | None = None
    ended_at: float | None = None
    message: str = ""
    simulated: bool = False

    @property
    def label(self) -> str:
        return f"{self.job_id} {self.phase}"


class ConsoleMessage(Message, bubble=False):
    """Base of every worker -> UI message; the app fans these out to the views."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Textual's default for a subclass is bubble=True: a fanned-out copy would climb back to the app and
        # be fanned out again (forever, when the sender is not the app itself).
        kwargs.setdefault("bubble", False)
        super().__init_subclass__(**kwargs)


class SnapshotArrived(ConsoleMessage):
    """A cluster snapshot (nodes, GPUs, alive/dead) from backend telemetry."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)  # a newer snapshot is the whole cluster again


class LogAppended(ConsoleMessage):
    """The log store grew; views that show it re-read lazily up to `total_lines`."""

    def __init__(self, total_lines: int) -> None:
        super().__init__()
        self.total_lines = total_lines

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogAppended)  # the newer total covers the lines of this one


class LogStoreOpened(ConsoleMessage):
    """The attached job has a fresh log store (a new run was attached): the logs view shows it from now on."""

    def __init__(self, store: LogStore) -> None:
        super().__init__()
        self.store = store

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogStoreOpened)  # only the newest attached job's store is shown


class MetricsArrived(ConsoleMessage):
    """New metric points (throughput, KL, ...): an immutable snapshot of the series and derived signals."""

    def __init__(self, payload: MetricsSnapshot) -> None:
        super().__init__()
        self.payload = payload

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsArrived)  # a newer snapshot holds every series and signal again


class RunStateChanged(ConsoleMessage):
    """The run controller's state changed (e.g. pending -> running -> stopping)."""

    def __init__(self, state: RunStatus) -> None:
        super().__init__()
        self.state = state


class AlertsChanged(ConsoleMessage):
    """The current alerts (copies of backend.signals.alerts' Alerts, which the engine goes on updating)."""

    def __init__(self, alerts: Iterable[Alert], diagnosis: Diagnosis | None = None) -> None:
        super().__init__()
        self.alerts: tuple[Alert, ...] = tuple(alerts)
        self.diagnosis = diagnosis  # why the run failed (frozen), for the Run view's diagnosis panel

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AlertsChanged)  # the newer set is every current alert


class DashboardLost(ConsoleMessage):
    """The Ray dashboard stopped answering; the app shows a banner and keeps responding."""

    def __init__(self, error_text: str) -> None:
        super().__init__()
        self.error_text = error_text


class DashboardBack(ConsoleMessage):
    """The Ray dashboard answers again; the banner goes away."""


class PreflightDone(ConsoleMessage):
    """Preflight of the current spec against the cluster finished (`findings`: backend's results)."""

    def __init__(self, findings: Iterable[Finding]) -> None:
        super().__init__()
        self.findings: tuple[Finding, ...] = tuple(findings)


class Notice(ConsoleMessage):
    """A one-line notice for the operator (shown as a toast)."""

    def __init__(self, text: str, severity: Severity = Severity.INFO) -> None:
        super().__init__()
        self.text = text
        self.severity: Severity = severity


class TerminalAlert(ConsoleMessage):
    """Critical alerts of the attached run that are news (`ids`: alert ids, data): the app rings the bell
    and sends a desktop notification (console/terminal_alerts.py)."""

    def __init__(self, ids: Iterable[str], run: str) -> None:
        super().__init__()
        self.ids: tuple[str, ...] = tuple(ids)
        self.run = run


class SinceLastLooked(ConsoleMessage):
    """What the run's watcher wrote to its ledger since this operator last looked (backend.cluster.incidents):
    `lines` as `status` prints them, `severity` the worst of them; shown on attach."""

    def __init__(self, job_id: str, lines: Iterable[str], severity: Severity) -> None:
        super().__init__()
        self.job_id = job_id
        self.lines: tuple[str, ...] = tuple(lines)
        self.severity: Severity = severity


class AuditChanged(ConsoleMessage):
    """The audit log gained entries (after a launch/abort); the events view re-reads it."""


class HistoryProgress(ConsoleMessage):
    """Rebuilding a job's log history from Ray: `lines` read so far; `done` once it is complete; `log_span`
    the first and newest timestamps read (miles' clock), where a replay knows them."""

    def __init__(
        self, job_id: str, lines: int, *, done: bool, log_span: tuple[float, float] | None = None
    ) -> None:
        super().__init__()
        self.job_id = job_id
        self.lines = lines
        self.done = done
        self.log_span = log_span

    def can_replace(self, message: Message) -> bool:
        """A newer count of the same job's history supersedes this one (its end is never dropped)."""
        return isinstance(message, HistoryProgress) and message.job_id == self.job_id and not self.done


class RolloutCursor(ConsoleMessage):
    """The rollout cursor moved (`[` / `]`): `mark` is a backend.signals.replay.RolloutMark (rollout, its
    first log line, its first optimizer step); charts mark it and the logs view jumps there."""

    def __init__(self, mark: RolloutMark) -> None:
        super().__init__()
        self.mark = mark


class ResumePlanned(ConsoleMessage):
    """A failed or stopped run's resume was read from Ray (its plan, the proposed diff, the checkpoint, the
    advice: backend.cluster.resume.ResumePlan, frozen): the Plan view opens on it (R in the Run view)."""

    def __init__(self, plan: ResumePlan) -> None:
        super().__init__()
        self.plan = plan


class AttemptsKnown(ConsoleMessage):
    """The attempts of the attached run's chain, oldest first (Ray's job list, read once per job)."""

    def __init__(self, job_id: str, attempts: tuple[Attempt, ...]) -> None:
        super().__init__()
        self.job_id = job_id
        self.attempts = attempts


class ShowLogLine(ConsoleMessage):
    """Go to one line of the run's log (its number in the log store): the Logs view moves its cursor there
    (the diagnosis panel's Enter: the cause's line)."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line


class BaselineAdded(ConsoleMessage):
    """A run to compare with was read to its end (`replay A B`, "compare with…"): `side` is its
    backend.signals.compare.RunSide; `flags` and `state` are what is known of the view's own run's launch and
    end (None: not known, or its live state says it)."""

    def __init__(self, side: RunSide, flags: LaunchFlags | None, state: str | None = None) -> None:
        super().__init__()
        self.side = side
        self.flags = flags
        self.state = state


class FleetWanted(Message):
    """The Run view's GPU fleet became visible (`wanted`) or hidden: the telemetry worker polls only while it
    shows. Posted by the view (it bubbles to the app, which keeps the answer for the worker)."""

    def __init__(self, wanted: bool) -> None:
        super().__init__()
        self.wanted = wanted
