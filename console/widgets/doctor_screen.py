"""The Doctor screen (D in the plan view, or "Doctor" in ctrl+p): `ultra-console doctor`'s lines for the
plan's spec, each check with its verdict and its fix, and the verdict on top.

The work is backend.cluster.doctor's (the head's checks, a pinned job per node), in a worker that posts
messages; this screen only draws them.
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
from backend.cluster.doctor import HeadFacts, run_doctor
from backend.errors import ConsoleError
from backend.redaction import public_line, public_text
from backend.settings import config_path
from console import keymap

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec
    from console.host import ConsoleHost


class DoctorLine(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class DoctorFinished(Message):
    def __init__(self, verdict: str) -> None:
        super().__init__()
        self.verdict = verdict


class DoctorScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    DoctorScreen { align: center middle; }
    DoctorScreen > Vertical { width: 96%; height: 90%; border: round $accent; background: $surface; }
    DoctorScreen #doctor-verdict { height: 1; text-style: bold; padding: 0 1; }
    DoctorScreen Log { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = keymap.bindings_for("doctor")

    def __init__(self, spec: RunSpec) -> None:
        super().__init__()
        self.spec = spec
        self.running = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("checking the head and every node…", id="doctor-verdict", markup=False)
            yield Log(id="doctor-log", highlight=False)

    def on_mount(self) -> None:
        self.action_recheck()

    def action_recheck(self) -> None:
        if self.running:
            self.notify("the doctor is still checking", severity="warning")
            return
        self.running = True
        self.query_one(Log).clear()
        self.query_one("#doctor-verdict", Static).update("checking the head and every node…")
        self._run()

    @work(exclusive=True, group="doctor", exit_on_error=False)
    async def _run(self) -> None:
        settings = cast("ConsoleHost", self.app).settings
        path = config_path()
        config = f"{path} read" if path.exists() else f"{path} absent: defaults"
        base = HeadFacts(config=config, address=settings.address, token_set=settings.token is not None)

        def answered(label: str) -> None:
            self.post_message(DoctorLine(f"{label} answered"))

        try:
            async with RayClient(settings.address, settings.token_text()) as client:
                report = await run_doctor(self.spec, client, base, on_node=answered)
        except ConsoleError as err:
            self.post_message(DoctorFinished(f"the doctor could not run: {public_line(str(err))}"))
            return
        for line in report.lines()[1:-1]:
            self.post_message(DoctorLine(line))
        self.post_message(DoctorFinished(report.summary()))

    def on_doctor_line(self, message: DoctorLine) -> None:
        self.query_one(Log).write_line(public_text(message.text).replace("\n", " "))

    def on_doctor_finished(self, message: DoctorFinished) -> None:
        self.running = False
        self.query_one("#doctor-verdict", Static).update(message.verdict)

    def action_close(self) -> None:
        self.dismiss(None)
