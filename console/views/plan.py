"""The plan view: pick a variant, edit the layout, see every rule's verdict, the command, preflight.

Every edit goes to backend: `backend.plan.evaluation.evaluate` (the spec with bad values reported per
field, the findings, the derived numbers, the command). Where to start comes from `plan_start`, on the
first frame through the app's plan preview helper. The view only routes keys and draws. Launch (`L`) is
refused while a bad value, an error finding or a failed preflight stands, and goes through a
confirmation modal with Cancel focused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Static

from backend.errors import ConsoleError
from backend.plan.dashboard_flags import phases_note
from backend.plan.derived import LayoutFigures
from backend.plan.evaluation import PlanEvaluation, evaluate
from backend.plan.finding import Finding, has_errors
from backend.plan.view_start import PlanStart, field_text, list_choices, plan_start, variant_base
from backend.severity import Severity
from console import keymap
from console.messages import AuditChanged, Notice, PreflightDone, ResumePlanned
from console.views.base import ConsoleView
from console.widgets.confirm import ConfirmModal
from console.widgets.layout_form import FIELDS, LayoutForm
from console.widgets.plan_panels import (
    CommandPanel,
    DerivedPanel,
    FindingsPanel,
    LaunchStatus,
    PreflightPanel,
    figure_text,
)
from console.widgets.resume_panel import ResumePanel

if TYPE_CHECKING:
    from backend.cluster.resume import ResumePlan
    from backend.plan.spec import RunSpec
    from backend.plan.variants import Variant

REBUILD_DEBOUNCE_S = 0.06


class Column(VerticalScroll, inherit_bindings=False, can_focus=False):
    """A scrolling column without arrow-key bindings: Up/Down move between fields instead."""


class PlanView(ConsoleView):
    SCOPE = "plan"
    BINDINGS: ClassVar[list[BindingType]] = [*keymap.bindings_for("plan")]
    DEFAULT_CSS = """
    PlanView #plan-body { height: 1fr; }
    PlanView #plan-left { width: 62; height: 1fr; border-right: vkey $panel; padding-right: 1; }
    PlanView #plan-right { width: 1fr; height: 1fr; padding-left: 1; }
    PlanView #plan-detail { layout: vertical; height: auto; }
    PlanView #plan-checks, PlanView #plan-numbers { height: auto; }
    PlanView .section { text-style: bold; color: $accent; height: 1; margin-top: 1; }
    PlanView #plan-left .section { margin-top: 0; }
    PlanView #plan-summary { height: auto; padding: 0 1; color: $text-muted; margin-bottom: 1; }
    """

    def __init__(self, start: Callable[[], PlanStart | None] | None = None, **kwargs: Any) -> None:
        """start: asked when composed for where to begin (the preview helper's copy); when it answers
        None, that is computed here."""
        super().__init__(**kwargs)
        self._start = start
        self.variants: list[Variant] | None = None  # listed when first needed
        self.choices: list[tuple[str, str]] = []  # (label, key) as the form shows them
        self.variant_key: str | None = None
        self.base: dict[str, Any] = {}
        self.edits: dict[str, str] = {}
        self.evaluation = PlanEvaluation()
        self.preflight_state = "not checked"
        self.preflight_findings: list[Finding] = []
        self.preflight_note = ""
        self._pending: Timer | None = None
        self.resume: ResumePlan | None = None  # R on a failed run: its plan, fix, checkpoint, advice
        self.resume_accepted: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        # Where to start is known before the widgets exist, so they are built holding it: no restyle
        # of the form once mounted, and the first frame is the whole view.
        start = (self._start() if self._start is not None else None) or self._compute_start()
        self._start = None
        for notice in start.notices:
            self.notify(notice, severity="error")
        self.choices, self.variant_key = start.choices, start.variant
        self.base = start.base or {}
        self.evaluation = start.evaluation
        yield LaunchStatus(id="launch-status")
        yield Static("", id="plan-summary")
        with Horizontal(id="plan-body"):
            with Column(id="plan-left"):
                yield Static("Layout", classes="section")
                yield LayoutForm(
                    self._form_values(self.base), self.choices, self.variant_key, self.flush, id="form"
                )
            with Column(id="plan-right"), Horizontal(id="plan-detail"):  # side by side when wide
                with Vertical(id="plan-checks"):
                    yield ResumePanel(id="resume")
                    yield Static("Findings", classes="section")
                    yield FindingsPanel(id="findings")
                    yield Static("Preflight", classes="section")
                    yield PreflightPanel(id="preflight")
                with Vertical(id="plan-numbers"):
                    yield Static("Command (c copies)", classes="section")
                    yield CommandPanel(id="command")
                    yield Static("Derived", classes="section")
                    yield DerivedPanel(id="derived")

    def _compute_start(self) -> PlanStart:
        app = self.console
        return plan_start(
            app.settings.preset, app.model_dir, run_id=app.preview_run_id, address=app.settings.address
        )

    def on_mount(self) -> None:
        self._draw()

    def build_spec_after_first_frame(self) -> None:
        """After the first frame: a preview's evaluation holds no spec object; build it here (launch
        and preflight need it). Nothing changes on screen: the same code computed the preview."""
        if self.evaluation.spec is None and self.evaluation.valid and self._pending is None:
            self.rebuild()

    # ------------------------------------------------------------------ state

    def _variant_list(self) -> list[Variant]:
        if self.variants is None:
            app = self.console
            self.variants, _preset, _notices = list_choices(app.settings.preset, app.model_dir)
        return self.variants

    @staticmethod
    def _form_values(base: dict[str, Any]) -> dict[str, str]:
        return {f.path: field_text(base, f.path) for f in FIELDS}

    def choose_variant(self, key: str) -> None:
        """Start over from a variant: its preset plus the overrides pointing at its checkpoint."""
        variant = next((v for v in self._variant_list() if v.key == key), None)
        if variant is None:
            return
        try:
            base = variant_base(variant)
        except ConsoleError as err:
            self.notify(str(err), severity="error")
            return
        self.variant_key, self.base, self.edits = key, base, {}
        form = self.query_one(LayoutForm)
        form.set_variants(self.choices, key)
        form.load(self._form_values(base))
        self.rebuild()

    # ------------------------------------------------------------------ resume

    def on_resume_planned(self, message: ResumePlanned) -> None:
        """Start from the failed run's own plan (with --load of its checkpoint) and its proposed fix."""
        plan = message.plan
        spec, _fixed = plan.spec(accepted=())
        if spec is None:
            self.notify("resume: the run's plan is no valid spec", severity="error")
            return
        self.resume, self.base = plan, spec.model_dump(mode="json")
        self.variant_key = None
        self._accept(frozenset(e.field for e in plan.edits if e.accepted))

    def _accept(self, accepted: frozenset[str]) -> None:
        """The accepted edits become the form's edits (a dropped one shows the run's own value again)."""
        plan = self.resume
        if plan is None:
            return
        self.resume_accepted = accepted
        self.edits = {e.field: e.after for e in plan.edits if e.field in accepted}
        from backend.plan.spec import apply_overrides  # lazy: as in _draw

        shown = apply_overrides(self.base, [f"{k}={v}" for k, v in self.edits.items()])
        self.query_one(LayoutForm).load(self._form_values(shown))
        self.query_one(ResumePanel).show(*_resume_text(plan, accepted))
        self.rebuild()

    @on(ResumePanel.Toggled)
    def _resume_toggled(self, event: ResumePanel.Toggled) -> None:
        if event.accepted != self.resume_accepted:
            self._accept(event.accepted)

    def rebuild(self) -> None:
        """Ask backend for the spec, findings, derived numbers and command; redraw the panels."""
        if self._pending is not None:
            self._pending.stop()
            self._pending = None
        app = self.console
        self.evaluation = evaluate(
            self.base, self.edits, run_id=app.preview_run_id, address=app.settings.address
        )
        if self.preflight_state in ("passed", "failed", "unavailable"):
            self.preflight_state = "stale"
        self._draw()

    @property
    def findings(self) -> list[Finding]:
        return self.evaluation.findings

    @property
    def derived(self) -> LayoutFigures | None:
        return self.evaluation.derived

    @property
    def command_text(self) -> str:
        return self.evaluation.command

    @property
    def error_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    def launch_blockers(self) -> list[str]:
        """Why launch is refused right now (empty = allowed)."""
        ev = self.evaluation
        out: list[str] = []
        if self._pending is not None:
            out.append("checking the edit")
        if ev.field_errors:
            out.append(f"{len(ev.field_errors)} bad value(s): {', '.join(ev.field_errors)}")
        if not ev.valid:
            out.append(ev.error or "no valid spec")
        if self.error_findings:
            rules = ", ".join(dict.fromkeys(f.rule for f in self.error_findings))
            out.append(f"{len(self.error_findings)} error finding(s): {rules}")
        if self.preflight_state == "failed":
            out.append("preflight failed")
        if self.preflight_state == "running":
            out.append("preflight is running")
        return out

    def _field_notes(self) -> dict[str, tuple[Severity, str]]:
        notes: dict[str, tuple[Severity, str]] = {}
        # The worst, then the most specific (fewest fields) finding owns a field's note.
        for f in sorted(self.findings, key=lambda f: (f.severity.rank, len(f.fields))):
            if f.severity is Severity.INFO:
                continue
            for path in f.fields:
                notes.setdefault(path, (f.severity, f"{f.message} — fix: {f.fix}" if f.fix else f.message))
        for path, message in self.evaluation.field_errors.items():
            notes[path] = (Severity.ERROR, message)
        return notes

    def _draw(self) -> None:
        ev = self.evaluation
        self.query_one(LayoutForm).mark(self._field_notes())
        self.query_one(FindingsPanel).set_findings(ev.findings, ev.field_errors, ev.error)
        self.query_one(DerivedPanel).set_derived(ev.derived)
        self.query_one(CommandPanel).set_command(
            ev.command or "(no command until the spec is valid)",
            phases_note(ev.command) if ev.command else "",
        )
        self.query_one(PreflightPanel).set_preflight(
            self.preflight_state, self.preflight_findings, self.preflight_note
        )
        self.query_one("#plan-summary", Static).update(Text(ev.summary), layout=False)
        status = self.query_one(LaunchStatus)
        blockers = self.launch_blockers()
        if self.console.readonly:
            status.set_status("readonly", "READ-ONLY: launch is disabled in this console")
        elif blockers:
            status.set_status("blocked", "Launch blocked: " + "; ".join(blockers))
        else:
            status.set_status("ready", f"Ready to launch — press {self._key('plan.launch')}")
        self.app.refresh_bindings()

    def _key(self, binding_id: str) -> str:
        spec = next(s for s in keymap.specs("plan") if s.id == binding_id)
        return keymap.effective_key(spec, self.console.keymap_overrides)

    # ------------------------------------------------------------------ events

    @on(LayoutForm.VariantPicked)
    def _variant_picked(self, event: LayoutForm.VariantPicked) -> None:
        if event.key != self.variant_key:
            self.choose_variant(event.key)

    @on(LayoutForm.Edited)
    def _edited(self, event: LayoutForm.Edited) -> None:
        base_text = field_text(self.base, event.path)
        before = dict(self.edits)
        if event.text == base_text:
            self.edits.pop(event.path, None)
        else:
            self.edits[event.path] = event.text
        if self.edits == before:
            return
        # Coalesce a burst of keystrokes into one rebuild: each one re-lays out the view.
        if self._pending is not None:
            self._pending.stop()
        self._pending = self.set_timer(REBUILD_DEBOUNCE_S, self.rebuild, name="plan-rebuild")

    def flush(self) -> None:
        """Apply a pending (debounced) edit now, and build the spec object a preview does not hold,
        so decisions never use a stale check."""
        if self._pending is not None or (self.evaluation.spec is None and self.evaluation.valid):
            self.rebuild()

    def on_preflight_done(self, message: PreflightDone) -> None:
        self.preflight_findings = list(message.findings)

        failed = has_errors(self.preflight_findings)
        self.preflight_state = "failed" if failed else "passed"
        self.preflight_note = ""
        self._draw()

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        allowed = super().check_action(action, parameters)
        if allowed and action == "launch" and self.launch_blockers():
            return None  # shown dimmed in the footer; the status line says why
        return allowed

    def refusal(self, action: str) -> str | None:
        """Why a key's action is refused now (its key is dimmed in the footer; pressing it says this)."""
        if action == "launch" and not self.console.readonly and self.launch_blockers():
            return "launch refused: " + "; ".join(self.launch_blockers())
        return super().refusal(action)

    def action_next_field(self) -> None:
        """Down: into the form, then row by row, then on to the command panel."""
        # `screen.focused`, not `has_focus`: that one follows the Focus event, a turn behind a key burst
        form = self.query_one(LayoutForm)
        focused = self.screen.focused
        if focused is self:
            self.screen.set_focus(form)  # at once: `focus()` also waits a turn
        elif focused is form and form.cursor < len(FIELDS):
            form.cursor_down()
        else:
            self.screen.focus_next()

    def action_prev_field(self) -> None:
        form = self.query_one(LayoutForm)
        focused = self.screen.focused
        if focused is form and form.cursor > 0:
            form.cursor_up()
        elif focused is not form and focused is not self:
            self.screen.focus_previous()

    def action_page(self, direction: int) -> None:
        """PgUp/PgDn scroll the findings column (the whole stacked view in the compact layout)."""
        target = self.query_one("#plan-body" if self.app.has_class("-compact") else "#plan-right")
        if direction > 0:
            target.scroll_page_down()
        else:
            target.scroll_page_up()

    def action_reset(self) -> None:
        if self.variant_key is not None:
            self.choose_variant(self.variant_key)

    def action_copy_command(self) -> None:
        self.flush()
        if not self.command_text:
            self.notify("no command to copy: the spec is not valid", severity="warning")
            return
        self.app.copy_to_clipboard(self.command_text)
        self.notify(f"command copied ({len(self.command_text)} chars, OSC 52)")

    def action_preflight(self) -> None:
        self.flush()
        if self.evaluation.spec is None:
            self.notify("preflight needs a valid spec first", severity="warning")
            return
        self.preflight_state, self.preflight_findings, self.preflight_note = "running", [], ""
        self._draw()
        self._run_preflight(self.evaluation.spec)

    def action_prepare(self) -> None:
        """P: every node's checkpoint and dataset
        (backend.cluster.prepare); the verdict comes back as preflight."""
        self.flush()
        if self.evaluation.spec is None:
            self.notify("prepare needs a valid spec first", severity="warning")
            return
        # lazy: the cluster's client and prepare stack (httpx, ~250 modules) are not on the first frame
        from console.widgets.prepare_screen import PrepareScreen

        self.app.push_screen(PrepareScreen(self.evaluation.spec, self))

    def action_doctor(self) -> None:
        """D: `ultra-console doctor` for the plan's spec (backend.cluster.doctor), one line per check."""
        self.flush()
        if self.evaluation.spec is None:
            self.notify("the doctor needs a valid spec first", severity="warning")
            return
        # lazy: the cluster's client and doctor stack are not on the first frame
        from console.widgets.doctor_screen import DoctorScreen

        self.app.push_screen(DoctorScreen(self.evaluation.spec))

    @work(exclusive=True, group="preflight", exit_on_error=False)
    async def _run_preflight(self, spec: RunSpec) -> None:
        # lazy: the cluster's client and prepare stack (httpx, ~250 modules) are not on the first frame
        from backend.cluster import preflight as pre
        from backend.cluster.dashboard import RayClient

        settings = self.console.settings
        token = settings.token_text()
        try:
            async with RayClient(settings.address, token) as client:
                findings = await pre.preflight(spec, client)
        except ConsoleError as err:
            self._preflight_unavailable(str(err))
            return
        self.post_message(PreflightDone(findings))

    def _preflight_unavailable(self, note: str) -> None:
        self.preflight_state, self.preflight_findings, self.preflight_note = "unavailable", [], note
        self._draw()

    def action_launch(self) -> None:
        if self.refuse_if_readonly("launch"):
            return
        self.flush()
        blockers = self.launch_blockers()
        if blockers:
            self.notify("launch refused: " + "; ".join(blockers), severity="error")
            return

        spec = self.evaluation.spec
        if spec is None:  # flush() builds it for every valid spec: with no blocker there is one
            return
        self.app.push_screen(
            ConfirmModal("Launch this run?", self._confirm_body(), "Launch"),
            lambda ok: self._launch(spec) if ok else None,
        )

    def _confirm_body(self) -> Text:
        warnings = [f for f in self.findings if f.severity is not Severity.ERROR]
        pf = {
            "not checked": "not checked (press p in the plan view first to check the cluster)",
            "stale": "stale: the spec changed since the last check",
        }.get(self.preflight_state, self.preflight_state)
        body = Text()
        body.append(self.evaluation.summary).append("\n\n")
        figures = (
            [(k, v) for k, v in self.derived.to_json().items() if k != "stages"][:8] if self.derived else []
        )
        body.append("Derived: ", "bold").append(  # as the Derived panel words them (no Python reprs)
            ", ".join(f"{k.replace('_', ' ')} {figure_text(v)}" for k, v in figures)
        )
        body.append("\nWarnings: ", "bold").append(
            str(len(warnings)) + "".join(f"\n  ! {w.message}" for w in warnings)
        )
        body.append("\nPreflight: ", "bold").append(pf)
        for f in self.preflight_findings:
            body.append(f"\n  {f.severity}: {f.message}")
        body.append("\n\nThe run lives in Ray: closing the console never stops it.", "dim")
        return body

    def _launch(self, spec: RunSpec) -> None:
        self.notify("launching…")
        self._launch_worker(spec)

    @work(exclusive=True, group="launch", exit_on_error=False)
    async def _launch_worker(self, spec: RunSpec) -> None:
        """Submit through backend.cluster.controller.RunController (set on the app by console.workers)."""
        from backend.plan.run_id import new_run_id
        from backend.plan.submission import secrets_from_env  # lazy: as in _draw

        app = self.console
        controller = app.controller
        if controller is None:
            app.post_message(
                Notice(
                    "launch is not available: no run controller is connected "
                    "(start the console without a subcommand, or `ultra-console demo`)",
                    Severity.ERROR,
                )
            )
            return
        resume, accepted = self.resume, self.resume_accepted
        try:  # the controller checks the rules and the cluster again, under the cluster-wide launch claim
            job = await controller.launch(
                spec,
                run_id=app.preview_run_id,
                secrets=secrets_from_env(os.environ),
                links=resume.links() if resume is not None else None,
            )
        except ConsoleError as err:
            app.post_message(Notice(f"launch failed: {err}", Severity.ERROR))
            app.post_message(AuditChanged())
            return
        app.preview_run_id = new_run_id()  # the next launch is a new run
        if resume is not None:
            from backend.cluster.resume import record_resume

            record_resume(controller.audit, resume, job.id, accepted)
            self.resume = None
            self.query_one(ResumePanel).hide()
        self.rebuild()
        app.post_message(Notice(f"launched {job.id or 'the run'}; showing the run view"))
        app.post_message(AuditChanged())
        app.action_show_view("run")


def _resume_text(
    plan: ResumePlan, accepted: frozenset[str]
) -> tuple[list[str], list[tuple[str, str, bool]], list[str]]:
    """The resume panel's lines: the run and its cause, the diff rows, the checkpoint and the advice."""
    head = [f"Resume {plan.job.id} ({plan.job.status}) as attempt {plan.next_attempt} of {plan.chain}"]
    if plan.diagnosis is not None:
        head.append(f"cause: {plan.diagnosis.headline}")
    parsed = plan.plan.parsed
    if parsed is not None:
        head.append("plan read back from its train.py argv")
        head += [f"unmapped (carried in run.extra_args): {flag}" for flag in parsed.unmapped]
    head.append("proposed fix (space: accept / drop):" if plan.edits else "no edit proposed")
    rows = [
        (f"{e.field} {e.before} → {e.after}  ({e.why})", e.field, e.field in accepted) for e in plan.edits
    ]
    tail = [f"load: {plan.checkpoint.note}", f"advice: {plan.advice.action.upper()}: {plan.advice.reason}"]
    return head, rows, tail
