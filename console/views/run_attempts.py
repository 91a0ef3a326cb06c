"""The Run view's attempts: the chain line under the header (attempt 1 FAILED cuda-oom → attempt 2 RUNNING),
R (resume: the Plan view on the run's own plan with the proposed fix), and the previous attempt for C.

The chain is read once per attached job from Ray's job list (a worker; the line appears when it answers and
only for a run that has more than one attempt). Resume is read the same way: plan, diagnosis, checkpoint,
advice, posted as ResumePlanned for the Plan view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.cluster.durations import fmt_duration
from backend.errors import ConsoleError
from console.messages import AttemptsKnown, Notice, ResumePlanned

if TYPE_CHECKING:
    from backend.cluster.resume import Attempt
    from console.views.base import ConsoleView

RESUMABLE = ("FAILED", "STOPPED")


def chain_line(attempts: tuple[Attempt, ...], current: str | None) -> str:
    """`attempts  1 FAILED cuda-oom 1m05s → 2 RUNNING (this)`; "" for a run with one attempt."""
    if len(attempts) < 2:
        return ""
    parts = []
    for i, a in enumerate(attempts):
        died_of = attempts[i + 1].cause_before if i + 1 < len(attempts) else None
        up = ""
        if a.start_ms and a.end_ms:
            up = " " + fmt_duration((a.end_ms - a.start_ms) / 1000)
        here = " (this)" if a.job == current else ""
        parts.append(f"{a.number} {a.status}{' ' + died_of if died_of else ''}{up}{here}")
    return "attempts  " + " → ".join(parts) + goodput(attempts)


def goodput(attempts: tuple[Attempt, ...]) -> str:
    """` · trained 3m10s, lost: cuda-oom 40s`: the chain's time up less what failures threw away (from each
    failed attempt's last checkpoint to its end, as its resume measured it), and that loss per cause."""
    up = sum((a.end_ms - a.start_ms) / 1000 for a in attempts if a.start_ms and a.end_ms)
    lost: dict[str, float] = {}
    for a in attempts:
        if a.cause_before and a.lost_before_s is not None:
            lost[a.cause_before] = lost.get(a.cause_before, 0.0) + a.lost_before_s
    if not up:
        return ""
    causes = ", ".join(f"{cause} {fmt_duration(s)}" for cause, s in lost.items())
    return f" · trained {fmt_duration(max(0.0, up - sum(lost.values())))}" + (
        f", lost: {causes}" if causes else ""
    )


class RunAttempts:
    """What the Run view knows of its run's attempts, and the R / C actions that use them."""

    def __init__(self, view: ConsoleView) -> None:
        self.view = view
        self.looked_up: str | None = None
        self.attempts: tuple[Attempt, ...] = ()

    def previous(self) -> str | None:
        """The job this attempt resumed (its metadata's `resume_of`), for C."""
        controller = self.view.console.controller
        job = controller.job if controller is not None else None
        return (job.meta.optional_text("resume_of") if job is not None else None) or None

    def line(self) -> str:
        controller = self.view.console.controller
        job = controller.job if controller is not None else None
        return chain_line(self.attempts, job.id if job is not None else None)

    def look_up(self, job_id: str) -> None:
        """Read the chain of `job_id` once (a worker); AttemptsKnown carries it to the view."""
        controller = self.view.console.controller
        if controller is None or job_id == self.looked_up or self.view.console.replay is not None:
            return
        self.looked_up = job_id

        async def read() -> None:
            from backend.cluster.resume import attempts, chain_of

            try:
                job = await controller.client.get_job(job_id)
                found = attempts(await controller.client.list_jobs(), chain_of(job))
            except ConsoleError:
                return
            self.view.post_message(AttemptsKnown(job_id, found))

        self.view.run_worker(read(), group="attempts", exclusive=True, exit_on_error=False)

    def known(self, message: AttemptsKnown) -> bool:
        if message.job_id != self.looked_up:
            return False
        self.attempts = message.attempts
        return True

    def resume(self) -> None:
        """R: the run's resume read from Ray, then the Plan view opens on it."""
        view = self.view
        controller = view.console.controller
        job = controller.job if controller is not None else None
        if controller is None or job is None or view.console.replay is not None:
            view.notify("no run attached: nothing to resume", severity="warning")
            return
        if job.status not in RESUMABLE:
            view.notify(f"run {job.id} is {job.status}: resume a failed or stopped run", severity="warning")
            return
        view.notify(f"reading {job.id}'s plan, cause and checkpoint…", timeout=3)

        async def plan() -> None:
            from backend.cluster.resume import plan_resume

            app = view.app
            try:
                found = await plan_resume(controller.client, job, await controller.client.list_jobs())
            except ConsoleError as err:
                app.post_message(Notice(f"resume: {err}"))
                return
            app.post_message(ResumePlanned(found))
            app.call_later(app.run_action, "show_view('plan')")

        view.run_worker(plan(), group="resume", exclusive=True, exit_on_error=False)
