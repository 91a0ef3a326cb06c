"""The prepare screen (P in the plan view): every alive node's checkpoint and dataset verdict, and with F a
fetch of what the nodes lack, with progress per node. Its verdict also lands in the plan view's preflight
(as preflight findings, rule P8), so the launch gate sees the same answer as `ultra-console prepare`.

The work is backend.cluster.prepare's, in a worker that posts messages; this screen only draws them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Log, Static

from backend.cluster.dashboard import RayClient
from backend.cluster.preflight import preflight
from backend.cluster.prepare import FetchEvent, prepare, table
from backend.cluster.telemetry import snapshot
from backend.errors import ConsoleError
from backend.redaction import public_line, public_text
from console import keymap
from console.messages import PreflightDone

if TYPE_CHECKING:
    from textual.widget import Widget

    from backend.plan.finding import Finding
    from backend.plan.spec import RunSpec
    from console.host import ConsoleHost


class PrepareLine(Message):
    """A line for the screen's log (a progress event or a table row)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PrepareFinished(Message):
    def __init__(self, verdict: str, findings: list[Finding]) -> None:
        super().__init__()
        self.verdict = verdict
        self.findings = findings


class PrepareScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    PrepareScreen { align: center middle; }
    PrepareScreen > Vertical { width: 90%; height: 80%; border: round $accent; background: $surface; }
    PrepareScreen #prepare-verdict { height: 1; text-style: bold; padding: 0 1; }
    PrepareScreen Log { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = keymap.bindings_for("prepare")

    def __init__(self, spec: RunSpec, target: Widget) -> None:
        """spec: the plan's RunSpec; target: the widget that receives PreflightDone (the plan view)."""
        super().__init__()
        self.spec, self.target = spec, target
        self.verdict = "checking every node…"
        self.running = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.verdict, id="prepare-verdict", markup=False)
            yield Log(id="prepare-log", highlight=False)

    def on_mount(self) -> None:
        self._start(fetch=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console shows no fetch key (and refuses the action if it is run another way)."""
        if action in keymap.mutating_actions("prepare") and getattr(self.app, "readonly", False):
            return False
        return True

    def _start(self, *, fetch: bool) -> None:
        if self.running:
            self.notify("prepare is still running", severity="warning")
            return
        self.running = True
        self.query_one("#prepare-verdict", Static).update(
            "fetching what nodes lack…" if fetch else "checking every node…"
        )
        self._run(fetch)

    @work(exclusive=True, group="prepare", exit_on_error=False)
    async def _run(self, fetch: bool) -> None:

        settings = cast("ConsoleHost", self.app).settings
        token = settings.token_text()

        def progress(event: FetchEvent) -> None:
            self.post_message(PrepareLine(event.line()))

        try:
            async with RayClient(settings.address, token) as client:
                findings = list(await preflight(self.spec, client))
                snap = await snapshot(client)
                report = await prepare(self.spec, client, snap, fetch=fetch, on_event=progress)
        except ConsoleError as err:
            self.post_message(PrepareFinished(f"prepare could not run: {public_line(str(err))}", []))
            return
        for line in table(report):
            self.post_message(PrepareLine(line))
        verdict = (
            "READY: every node holds the checkpoint and the dataset"
            if report.ready
            else (
                "NOT READY — press F to fetch what the nodes lack"
                if not fetch
                else "NOT READY after the fetch"
            )
        )
        self.post_message(
            PrepareFinished(verdict, [f for f in findings if f.rule not in ("P4", "P5")] + report.findings())
        )

    def on_prepare_line(self, message: PrepareLine) -> None:
        self.query_one(Log).write_line(public_text(message.text).replace("\n", " "))

    def on_prepare_finished(self, message: PrepareFinished) -> None:
        self.running = False
        self.verdict = message.verdict
        self.query_one("#prepare-verdict", Static).update(message.verdict)
        if message.findings or message.verdict.startswith(("READY", "NOT READY")):
            self.target.post_message(PreflightDone(message.findings))

    def action_fetch(self) -> None:
        if getattr(self.app, "readonly", False):
            self.notify("read-only console: fetching is refused", severity="warning")
            return
        self._start(fetch=True)

    def action_recheck(self) -> None:
        self._start(fetch=False)

    def action_close(self) -> None:
        self.dismiss(None)
