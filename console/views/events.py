"""The events view: current alerts (from backend.signals.alerts via AlertsChanged) and the operator audit log.

The audit log is read with backend.cluster.audit.AuditLog (JSON lines under settings.state_dir), in a thread
worker, when the view is shown, on `r`, and after an action records to it (AuditChanged). Only the
last AUDIT_LIMIT entries are shown; the file keeps everything. A replay shows no audit log: what this
machine's consoles did is no part of the replayed run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from backend.cluster.audit import AuditEntry, AuditLog, AuditRead
from backend.errors import ConsoleError
from backend.node_names import NodeNames
from backend.redaction import public_line
from backend.severity import Severity
from backend.signals.alerts import cause_first
from console import keymap
from console.messages import AlertsChanged, AuditChanged, SinceLastLooked, SnapshotArrived
from console.views.base import ConsoleView
from console.widgets.text_modal import TextModal

if TYPE_CHECKING:
    from backend.signals.alerts import Alert

AUDIT_LIMIT = 500
AUDIT_TITLE = "Audit log (launch / abort / cleanup by any console) · r refresh · c copy"
SEVERITY_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.ERROR: "bold red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}


class EventsView(ConsoleView):
    SCOPE = "events"
    BINDINGS = keymap.bindings_for("events")
    DEFAULT_CSS = """
    EventsView > Vertical { height: 1fr; }
    EventsView .section { text-style: bold; color: $accent; height: 1; }
    EventsView #alerts { height: auto; max-height: 12; }
    EventsView #audit { height: 1fr; }
    EventsView #no-alerts { height: auto; color: $text-muted; padding-left: 1; }
    EventsView #since { height: auto; max-height: 14; padding-left: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alerts: tuple[Alert, ...] = ()
        self.audit: tuple[AuditEntry, ...] = ()
        self.audit_note = ""  # the lines of the audit file that were skipped, in one line
        self.node_names = NodeNames()  # the cluster's: an alert naming a node by IP or id says its name

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                "Since you last looked (the run's watcher, while no console was open)",
                classes="section",
                id="since-title",
                markup=False,
            )
            yield Static("", id="since", markup=False)
            yield Static("Alerts", classes="section", id="alerts-title")
            yield Static("no alerts", id="no-alerts")
            yield DataTable(id="alerts", cursor_type="row", zebra_stripes=False)
            yield Static(AUDIT_TITLE, classes="section", id="audit-title", markup=False)
            yield DataTable(id="audit", cursor_type="row")

    def on_mount(self) -> None:
        alerts = self.query_one("#alerts", DataTable)
        alerts.add_columns("severity", "step", "alert", "id")
        audit = self.query_one("#audit", DataTable)
        audit.add_columns("time (UTC)", "user", "action", "job", "result", "command")
        # A replay's run is not this machine's: what this machine's consoles did is no part of it.
        self.query_one("#audit-title").display = audit.display = self.console.replay is None
        self.query_one("#since-title").display = self.query_one("#since").display = False
        self._draw_alerts()
        self.load_audit()

    def view_shown(self) -> None:
        self.load_audit()

    # ------------------------------------------------------------------ since you last looked

    def on_since_last_looked(self, message: SinceLastLooked) -> None:
        """The ledger's news for this operator, from the watcher's file (text from elsewhere: cleaned)."""
        text = "\n".join(public_line(line) for line in message.lines[1:])
        self.query_one("#since", Static).update(Text(text, SEVERITY_STYLE[message.severity]))
        self.query_one("#since-title", Static).update(
            f"{public_line(message.lines[0]).capitalize()} (the run's watcher, while no console looked)"
        )
        self.query_one("#since-title").display = self.query_one("#since").display = True

    # ------------------------------------------------------------------ alerts

    def on_alerts_changed(self, message: AlertsChanged) -> None:
        self.alerts = message.alerts
        self._draw_alerts()

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        names = message.snapshot.names
        if names != self.node_names:
            self.node_names = names
            self._draw_alerts()

    def _draw_alerts(self) -> None:
        table = self.query_one("#alerts", DataTable)
        table.clear()
        for alert in cause_first(self.alerts):
            step = alert.step
            shown_step = "" if step is None else str(int(step) if float(step).is_integer() else step)
            message = self.node_names.in_text(alert.message) + (
                f"  (×{alert.count})" if alert.count > 1 else ""
            )
            if alert.cause is not None:  # a failure: the diagnosis' cause, or one of its consequences
                message = ("CAUSE · " if alert.cause == 1 else "consequence · ") + message
            if alert.advice:
                message += f"  → try: {alert.advice}"
            if alert.sample:  # the log line that said it (sanitised, cut)
                message += f"  ⟨{alert.sample}⟩"
            table.add_row(
                Text(alert.severity.value, SEVERITY_STYLE[alert.severity]),
                shown_step,
                Text(message),
                alert.id,
            )
        table.display = bool(self.alerts)
        self.query_one("#no-alerts").display = not self.alerts
        self.query_one("#alerts-title", Static).update(f"Alerts ({len(self.alerts)})")

    # ------------------------------------------------------------------ audit

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("refresh", "copy_entry") and self.console.replay is not None:
            return False  # both act on the audit log, which a replay does not show: not in the footer either
        return super().check_action(action, parameters)

    def on_audit_changed(self, _message: AuditChanged) -> None:
        self.load_audit()

    def action_refresh(self) -> None:
        self.load_audit()

    @work(thread=True, exclusive=True, group="audit-read", exit_on_error=False)
    def load_audit(self) -> None:
        if self.console.replay is not None:
            return
        try:
            read = AuditLog(self.console.settings.state_dir).read(limit=AUDIT_LIMIT)
        except ConsoleError as err:
            self.app.call_from_thread(self.notify, str(err), severity="error")
            return
        self.app.call_from_thread(self._draw_audit, read)

    def _draw_audit(self, read: AuditRead) -> None:
        if read.note != self.audit_note:
            self.audit_note = read.note
            title = f"{AUDIT_TITLE} · {public_line(read.note)}" if read.note else AUDIT_TITLE
            self.query_one("#audit-title", Static).update(title)
        entries = read.entries
        if entries == self.audit and self.query_one("#audit", DataTable).row_count == len(entries):
            return
        self.audit = entries
        table = self.query_one("#audit", DataTable)
        table.clear()
        for e in reversed(entries):  # newest first; a file: text from elsewhere
            cells = [public_line(text) for text in (e.user, e.action, e.job or "", e.result, e.command)]
            table.add_row(
                public_line(e.time[:19].replace("T", " ")), *cells[:3], Text(cells[3]), Text(cells[4][:200])
            )

    def action_open_alert(self) -> None:
        """`o` (or Enter on a row): the selected alert whole, its message, sample and count, wrapped."""
        table = self.query_one("#alerts", DataTable)
        shown = cause_first(self.alerts)
        if not shown or table.cursor_row < 0:
            self.notify("no alert selected", severity="warning")
            return
        alert = shown[min(table.cursor_row, len(shown) - 1)]
        self.app.push_screen(
            TextModal(f"{alert.severity.value}: {alert.id}", alert_text(alert, self.node_names))
        )

    @on(DataTable.RowSelected, "#alerts")
    def _alert_selected(self) -> None:
        self.action_open_alert()

    def action_copy_entry(self) -> None:
        table = self.query_one("#audit", DataTable)
        if not self.audit or table.cursor_row < 0:
            self.notify("no audit entry selected", severity="warning")
            return
        entry = list(reversed(self.audit))[min(table.cursor_row, len(self.audit) - 1)]
        text = entry.command or json.dumps(entry.to_json(), ensure_ascii=False)
        self.app.copy_to_clipboard(text)
        self.notify(f"copied ({len(text)} chars, OSC 52)")


def alert_text(alert: Alert, names: NodeNames | None = None) -> str:
    """An alert whole, as the modal shows it: the message (its nodes named as the GPU pane names them), then
    what else is known, one fact a line; the sample is the log's line as written."""
    lines = [public_line((names or NodeNames()).in_text(alert.message))]
    if alert.count > 1:
        lines.append(f"seen {alert.count} times")
    if alert.sample:
        lines += ["", "sample:", public_line(alert.sample)]
    if alert.action:
        lines.append(f"action: {alert.action}")
    return "\n".join(lines)
