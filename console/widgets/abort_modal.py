"""The abort modal: what will be lost, then graceful stop, then (separately) force, then leftovers.

Escalation as nvitop and turm do it: the first confirmation sends only a graceful stop (Ray's
stop, which miles sees as SIGINT); only if the job is still alive does a *second, separate*
confirmation offer the force kill. Cancel has focus at every step. After the job is stopped the
modal asks each node the job ran on what holds its GPUs now ("checking N nodes…", each answer bounded,
a silent node named), lists the job's leftovers and offers to clean them up; a holder the node cannot
identify as the job's is shown and never offered for a signal. Nothing here comes from dashboard data.

The modal does no Ray I/O of its own: it is handed an `AbortActions` (the run view binds it to
backend.cluster.controller.RunController) and runs those coroutines in workers, showing each outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

if TYPE_CHECKING:
    from backend.cluster.leftovers import Leftover, LeftoverReport


@dataclass
class AbortActions:
    """What the modal may do; each returns when that step is over.

    stop: graceful stop; returns True once the job is terminal (STOPPED), False if it still runs.
    force: force stop; returns True once terminal.
    check_nodes: the labels of the nodes a leftover check will ask (said while they are asked).
    leftovers: the on-node reading of GPU processes after the stop.
    cleanup: kill the job's leftovers; returns a one-line summary.
    """

    stop: Callable[[], Awaitable[bool]]
    force: Callable[[], Awaitable[bool]]
    check_nodes: Callable[[], Awaitable[Sequence[str]]]
    leftovers: Callable[[], Awaitable[LeftoverReport]]
    cleanup: Callable[[Sequence[Leftover]], Awaitable[str]]


class AbortModal(ModalScreen[str]):
    """Dismisses with one of: "cancelled", "stopped", "forced", "cleaned", "failed"."""

    DEFAULT_CSS = """
    AbortModal { align: center middle; }
    AbortModal > Vertical { width: 84; max-width: 95%; height: auto; max-height: 90%;
                            border: thick $error; background: $surface; padding: 0 1; }
    AbortModal #abort-title { text-style: bold; padding-bottom: 1; }
    AbortModal #abort-body { height: auto; max-height: 20; }
    AbortModal #abort-buttons { height: auto; align-horizontal: right; padding-top: 1; }
    AbortModal Button { margin-left: 2; min-width: 12; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", show=True),
        Binding("left,right", "app.focus_next", "Switch", show=False),
    ]

    def __init__(self, job: str, loss_text: str, actions: AbortActions) -> None:
        super().__init__()
        self.job = job
        self.loss_text = loss_text
        self.actions = actions
        self.stage = "confirm"  # confirm -> stopping -> (force?) -> forcing -> leftovers -> cleaning -> done
        self.leftover_items: list[Leftover] = []
        self.result = "cancelled"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Abort run {self.job}?", id="abort-title", markup=False)
            yield Static(self._confirm_text(), id="abort-body", markup=False)
            with Horizontal(id="abort-buttons"):
                yield Button("Cancel", id="abort-cancel", variant="default")
                yield Button("Stop gracefully", id="abort-go", variant="error")

    def _confirm_text(self) -> str:
        return (
            f"{self.loss_text}\n\nStep 1 sends a graceful stop (miles gets SIGINT and may finish its "
            "current step). Force kill is offered only if the job does not stop."
        )

    def on_mount(self) -> None:
        self.query_one("#abort-cancel", Button).focus()

    def _show(self, title: str, body: str, go: str | None, cancel: str = "Cancel") -> None:
        self.query_one("#abort-title", Static).update(title)
        self.query_one("#abort-body", Static).update(body)
        go_button = self.query_one("#abort-go", Button)
        cancel_button = self.query_one("#abort-cancel", Button)
        cancel_button.label = cancel
        go_button.display = go is not None
        if go is not None:
            go_button.label = go
            # A new step is a new button: Textual ignores a press within 0.2 s of the last one ("-active").
            go_button.remove_class("-active")
        cancel_button.disabled = False
        self.set_focus(cancel_button)  # now, not deferred: a key pressed next lands on Cancel

    def _busy(self, title: str, body: str) -> None:
        self._show(title, body, None, "Close")

    def action_cancel(self) -> None:
        self.dismiss(self.result)

    @on(Button.Pressed, "#abort-cancel")
    def _cancel(self) -> None:
        self.dismiss(self.result)

    @on(Button.Pressed, "#abort-go")
    def _go(self) -> None:
        if self.stage == "confirm":
            self.stage = "stopping"
            self._busy(
                "Stopping gracefully…",
                f"Sent a graceful stop to {self.job}; waiting for Ray to report it stopped.",
            )
            self._run_stop(force=False)
        elif self.stage == "force?":
            self.stage = "forcing"
            self._busy("Force stopping…", f"Force stopping {self.job}.")
            self._run_stop(force=True)
        elif self.stage == "leftovers":
            self.stage = "cleaning"
            self._busy(
                "Cleaning up…",
                f"Killing {len(self.leftover_items)} leftover GPU process(es) of the job by PID.",
            )
            self._run_cleanup()

    @work(exclusive=True, group="abort", exit_on_error=False)
    async def _run_stop(self, force: bool) -> None:
        try:
            stopped = await (self.actions.force() if force else self.actions.stop())
        except Exception as err:  # shown, never a crash: the operator may retry or force
            stopped, error = False, str(err)
        else:
            error = ""
        if stopped:
            self.result = "forced" if force else "stopped"
            await self._after_stop()
            return
        if force:
            self.result = "failed"
            self.stage = "done"
            self._show(
                "Force stop did not finish",
                f"{error or 'The job is still not terminal.'} Check `ultra-console status`.",
                None,
                "Close",
            )
            return
        self.stage = "force?"
        self._show(
            "The job did not stop gracefully",
            f"{error or 'Ray still reports the job running after the graceful stop.'}\n\n"
            "Force stop kills the job's processes now; anything since the last checkpoint is lost.",
            "Force stop",
        )

    async def _after_stop(self) -> None:
        try:
            nodes = list(await self.actions.check_nodes())
            self._busy(
                "Stopped — checking for leftovers",
                f"{self.job} is STOPPED. Checking {len(nodes)} node(s) for GPU processes left behind… "
                f"(read on each node now: {', '.join(nodes[:6])}{' …' if len(nodes) > 6 else ''})",
            )
            report = await self.actions.leftovers()
        except Exception as err:
            self.stage = "done"
            self._show(
                "Stopped",
                f"{self.job} is STOPPED. Could not check for leftover GPU processes: {err}",
                None,
                "Close",
            )
            return
        self.leftover_items = list(report.killable)
        lines = report.lines()
        shown = "\n".join(lines[:24]) + (
            f"\n  … and {len(lines) - 24} more line(s)" if len(lines) > 24 else ""
        )
        summary = report.summary()
        if not self.leftover_items:
            self.stage = "done"
            title = "Stopped" if report.clean else "Stopped — see what the nodes said"
            self._show(
                title,
                f"{self.job} is STOPPED. {summary[0].upper()}{summary[1:]}."
                + (f"\n\n{shown}" if shown else ""),
                None,
                "Close",
            )
            return
        self.stage = "leftovers"
        self._show(
            "Stopped — GPU processes left behind",
            f"{self.job} is STOPPED, but {shown}\n\n"
            "Clean up kills exactly the job's PIDs above (SIGTERM, then SIGKILL), after the node checks "
            "again that each still holds GPU memory and is the job's.",
            "Clean up",
            "Leave them",
        )

    @work(exclusive=True, group="abort", exit_on_error=False)
    async def _run_cleanup(self) -> None:
        try:
            summary = await self.actions.cleanup(self.leftover_items)
        except Exception as err:
            summary = f"cleanup failed: {err}"
        else:
            self.result = "cleaned"
        self.stage = "done"
        self._show("Cleanup finished", summary, None, "Close")
