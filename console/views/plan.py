"""The plan view: pick a variant, edit the layout, see every rule's verdict, the command, preflight.

Every edit goes to backend: `spec_edit.edit_spec` (recipe overrides + validation, bad values
reported per field), `constraints.check`/`derive`, `command.build_submission(...).shell()`.
The view only routes keys and draws. Launch (`L`) is refused while a bad value, an error finding or a
failed preflight stands, and goes through a confirmation modal with Cancel focused.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Input, Select, Static

from backend.errors import ConsoleError
from backend.recipe import DEFAULT_PRESET, load_preset_dict
from backend.spec_edit import EditResult, edit_spec
from backend.variants import Variant, list_variants
from console import keymap
from console.messages import AuditChanged, Notice, PreflightDone
from console.views.base import ConsoleView
from console.widgets.confirm import ConfirmModal
from console.widgets.layout_form import FIELDS, LayoutForm, QuietSelect
from console.widgets.plan_panels import (
    CommandPanel,
    DerivedPanel,
    FindingsPanel,
    LaunchStatus,
    PreflightPanel,
)

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
REBUILD_DEBOUNCE_S = 0.06


class Column(VerticalScroll, inherit_bindings=False, can_focus=False):
    """A scrolling column without arrow-key bindings: Up/Down move between fields instead."""


def _optional(module: str) -> Any | None:
    """A backend module another helper may not have landed yet (None if absent)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name == module:
            return None
        raise


def _text_of(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _get(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


class PlanView(ConsoleView):
    SCOPE = "plan"
    BINDINGS = keymap.bindings_for("plan")
    DEFAULT_CSS = """
    PlanView #plan-body { height: 1fr; }
    PlanView #plan-left { width: 62; height: 1fr; border-right: vkey $panel; padding-right: 1; }
    PlanView #plan-right { width: 1fr; height: 1fr; padding-left: 1; }
    PlanView #plan-detail { layout: vertical; height: auto; }
    PlanView #plan-checks, PlanView #plan-numbers { height: auto; }
    PlanView .section { text-style: bold; color: $accent; height: 1; margin-top: 1; }
    PlanView #plan-left .section { margin-top: 0; }
    PlanView #variant { width: 1fr; height: 1; margin-bottom: 1; }
    PlanView #variant > SelectCurrent { height: 1; border: none; padding: 0 1; }
    PlanView #plan-summary { height: auto; padding: 0 1; color: $text-muted; margin-bottom: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variants: list[Variant] = []
        self.variant: Variant | None = None
        self.base: dict[str, Any] = {}
        self.edits: dict[str, str] = {}
        self.result: EditResult = EditResult(None)
        self.findings: list[Any] = []
        self.derived: dict[str, Any] = {}
        self.command_text = ""
        self.preflight_state = "not checked"
        self.preflight_findings: list[Any] = []
        self.preflight_note = ""
        self._rules = _optional("backend.constraints")
        self._pending: Timer | None = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        # The variants and the first one's values are known before the widgets exist, so they are
        # built holding them: no restyle of every input (and of the select) once mounted.
        first = self._first_variant()
        base = self._variant_base(first) if first is not None else None
        self._initial = (first, base) if first is not None and base is not None else None
        options = [(v.label, v.key) for v in self.variants]
        yield LaunchStatus(id="launch-status")
        yield Static("", id="plan-summary")
        with Horizontal(id="plan-body"):
            with Column(id="plan-left"):
                yield Static("Variant", classes="section")
                yield QuietSelect(options, id="variant", allow_blank=True, prompt="(no variants)",
                                  value=first.key if self._initial and first else Select.BLANK)
                yield Static("Layout", classes="section")
                yield LayoutForm(id="form", values=self._form_values(base) if base is not None else None)
            with Column(id="plan-right"), Horizontal(id="plan-detail"):  # side by side when wide
                with Vertical(id="plan-checks"):
                    yield Static("Findings", classes="section")
                    yield FindingsPanel(id="findings")
                    yield Static("Preflight", classes="section")
                    yield PreflightPanel(id="preflight")
                with Vertical(id="plan-numbers"):
                    yield Static("Command (c copies)", classes="section")
                    yield CommandPanel(id="command")
                    yield Static("Derived", classes="section")
                    yield DerivedPanel(id="derived")

    def _first_variant(self) -> Variant | None:
        """List the variants (into `self.variants`); the one to start from: the configured preset's."""
        settings = self.app.settings  # type: ignore[attr-defined]
        preset = settings.preset or DEFAULT_PRESET
        try:
            model_dir = getattr(self.app, "model_dir", None) or load_preset_dict(preset).get("paths", {}).get(
                "model_dir")
        except ConsoleError as err:
            self.notify(str(err), severity="error")
            preset, model_dir = DEFAULT_PRESET, None
        self.variants = list_variants(model_dir, DEFAULT_PRESET, current=preset)
        return next((v for v in self.variants if v.preset == preset and v.kind in ("file", "preset")),
                    self.variants[0] if self.variants else None)

    def on_mount(self) -> None:
        if self._initial is not None:
            self._start_from(*self._initial)

    # ------------------------------------------------------------------ state

    def _variant_base(self, variant: Variant) -> dict[str, Any] | None:
        """The variant's preset plus the overrides pointing at its checkpoint (None: said why)."""
        try:
            base = load_preset_dict(variant.preset)
        except ConsoleError as err:
            self.notify(str(err), severity="error")
            return None
        for path, value in variant.overrides:
            node = base
            *parents, leaf = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return base

    @staticmethod
    def _form_values(base: dict[str, Any]) -> dict[str, str]:
        return {f.path: _text_of(_get(base, f.path)) for f in FIELDS}

    def choose_variant(self, key: str) -> None:
        """Start over from a variant: its preset plus the overrides pointing at its checkpoint."""
        variant = next((v for v in self.variants if v.key == key), None)
        if variant is None:
            return
        base = self._variant_base(variant)
        if base is not None:
            self._start_from(variant, base)

    def _start_from(self, variant: Variant, base: dict[str, Any]) -> None:
        self.variant, self.base, self.edits = variant, base, {}
        select = self.query_one("#variant", Select)
        if select.value != variant.key:
            with select.prevent(Select.Changed):
                select.value = variant.key
        self.query_one(LayoutForm).load(self._form_values(base))  # no-op when it already shows them
        self.rebuild()

    def rebuild(self) -> None:
        """Ask backend for the spec, findings, derived numbers and command; redraw the panels."""
        if self._pending is not None:
            self._pending.stop()
            self._pending = None
        self.result = edit_spec(self.base, self.edits)
        spec = self.result.spec
        self.findings, self.derived, self.command_text = [], {}, ""
        if spec is not None and self._rules is not None:
            self.findings = sorted(self._rules.check(spec), key=lambda f: SEVERITY_RANK.get(f.severity, 3))
            self.derived = dict(self._rules.derive(spec))
        if spec is not None:
            self.command_text = self._command(spec)
        if self.preflight_state in ("passed", "failed", "unavailable"):
            self.preflight_state = "stale"
        self._draw()

    def _command(self, spec: Any) -> str:
        from backend.command import build_submission

        app = self.app
        try:
            sub = build_submission(spec, run_id=getattr(app, "preview_run_id", None))
        except ConsoleError as err:
            return f"(no command: {err})"
        return sub.shell(app.settings.address)  # type: ignore[attr-defined]

    @property
    def error_findings(self) -> list[Any]:
        return [f for f in self.findings if f.severity == "error"]

    def launch_blockers(self) -> list[str]:
        """Why launch is refused right now (empty = allowed)."""
        out: list[str] = []
        if self._pending is not None:
            out.append("checking the edit")
        if self.result.field_errors:
            out.append(f"{len(self.result.field_errors)} bad value(s): {', '.join(self.result.field_errors)}")
        if self.result.spec is None:
            out.append(self.result.error or "no valid spec")
        if self._rules is None:
            out.append("the rule engine (backend.constraints) is not available")
        if self.error_findings:
            rules = ", ".join(dict.fromkeys(f.rule for f in self.error_findings))
            out.append(f"{len(self.error_findings)} error finding(s): {rules}")
        if self.preflight_state == "failed":
            out.append("preflight failed")
        if self.preflight_state == "running":
            out.append("preflight is running")
        return out

    def _field_notes(self) -> dict[str, tuple[str, str]]:
        notes: dict[str, tuple[str, str]] = {}
        # The worst, then the most specific (fewest fields) finding owns a field's note.
        for f in sorted(self.findings, key=lambda f: (SEVERITY_RANK.get(f.severity, 3), len(f.fields))):
            if f.severity not in ("error", "warning"):
                continue
            for path in f.fields:
                notes.setdefault(path, (f.severity, f"{f.message} — fix: {f.fix}" if f.fix else f.message))
        for path, message in self.result.field_errors.items():
            notes[path] = ("error", message)
        return notes

    def _draw(self) -> None:
        self.query_one(LayoutForm).mark(self._field_notes())
        self.query_one(FindingsPanel).set_findings(self.findings, self.result.field_errors, self.result.error)
        self.query_one(DerivedPanel).set_derived(self.derived)
        self.query_one(CommandPanel).set_command(self.command_text or "(no command until the spec is valid)")
        self.query_one(PreflightPanel).set_preflight(self.preflight_state, self.preflight_findings,
                                                    self.preflight_note)
        self.query_one("#plan-summary", Static).update(self._summary(), layout=False)
        status = self.query_one(LaunchStatus)
        blockers = self.launch_blockers()
        if getattr(self.app, "readonly", False):
            status.set_status("readonly", "READ-ONLY: launch is disabled in this console")
        elif blockers:
            status.set_status("blocked", "Launch blocked: " + "; ".join(blockers))
        else:
            status.set_status("ready", f"Ready to launch — press {self._key('plan.launch')}")
        self.app.refresh_bindings()

    def _key(self, binding_id: str) -> str:
        spec = next(s for s in keymap.specs("plan") if s.id == binding_id)
        return keymap.effective_key(spec, getattr(self.app, "keymap_overrides", {}))

    def _summary(self) -> Text:
        spec = self.result.spec
        if spec is None:
            return Text("no valid spec")
        t, r = spec.train, spec.rollout
        return Text(f"{spec.model.name} · {spec.cluster.nodes}×{spec.cluster.gpus_per_node} = "
                    f"{spec.cluster.total_gpus} GPUs · TP{t.tp} PP{t.pp} CP{t.cp} EP{t.ep} · engine "
                    f"{r.gpus_per_engine} GPUs EP{r.ep} DP{r.dp} · mode {spec.run.mode}")

    # ------------------------------------------------------------------ events

    @on(Select.Changed, "#variant")
    def _variant_changed(self, event: Select.Changed) -> None:
        current = self.variant.key if self.variant is not None else None
        if isinstance(event.value, str) and event.value != current:  # not the select announcing its first value
            self.choose_variant(event.value)

    @on(LayoutForm.Edited)
    def _edited(self, event: LayoutForm.Edited) -> None:
        base_text = _text_of(_get(self.base, event.path))
        before = dict(self.edits)
        if event.text == base_text:
            self.edits.pop(event.path, None)
        else:
            self.edits[event.path] = event.text
        if self.edits == before:
            return  # e.g. a Select announcing its initial value
        # Coalesce a burst of keystrokes into one rebuild: each one re-lays out the view.
        if self._pending is not None:
            self._pending.stop()
        self._pending = self.set_timer(REBUILD_DEBOUNCE_S, self.rebuild, name="plan-rebuild")

    def flush(self) -> None:
        """Apply a pending (debounced) edit now, so decisions never use a stale check."""
        if self._pending is not None:
            self.rebuild()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.screen.focus_next()

    def on_preflight_done(self, message: PreflightDone) -> None:
        self.preflight_findings = list(message.findings)
        from backend.constraints import has_errors  # preflight findings are rule-engine Findings

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

    def action_next_field(self) -> None:
        self.screen.focus_next()

    def action_prev_field(self) -> None:
        self.screen.focus_previous()

    def action_page(self, direction: int) -> None:
        """PgUp/PgDn scroll the findings column (the whole stacked view in the compact layout)."""
        target = self.query_one("#plan-body" if self.app.has_class("-compact") else "#plan-right")
        if direction > 0:
            target.scroll_page_down()
        else:
            target.scroll_page_up()

    def action_reset(self) -> None:
        if self.variant is not None:
            self.choose_variant(self.variant.key)

    def action_copy_command(self) -> None:
        self.flush()
        if not self.command_text:
            self.notify("no command to copy: the spec is not valid", severity="warning")
            return
        self.app.copy_to_clipboard(self.command_text)
        self.notify(f"command copied ({len(self.command_text)} chars, OSC 52)")

    def action_preflight(self) -> None:
        self.flush()
        if self.result.spec is None:
            self.notify("preflight needs a valid spec first", severity="warning")
            return
        self.preflight_state, self.preflight_findings, self.preflight_note = "running", [], ""
        self._draw()
        self._run_preflight(self.result.spec)

    @work(exclusive=True, group="preflight", exit_on_error=False)
    async def _run_preflight(self, spec: Any) -> None:
        pre = _optional("backend.preflight")
        if pre is None:
            self._preflight_unavailable("backend.preflight is not available in this build")
            return
        from backend.ray_api import RayClient

        settings = self.app.settings  # type: ignore[attr-defined]
        token = settings.token.get_secret_value() if settings.token else None
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
        spec = self.result.spec
        self.app.push_screen(ConfirmModal("Launch this run?", self._confirm_body(), "Launch"),
                             lambda ok: self._launch(spec) if ok else None)

    def _confirm_body(self) -> Text:
        warnings = [f for f in self.findings if f.severity != "error"]
        pf = {"not checked": "not checked (press p in the plan view first to check the cluster)",
              "stale": "stale: the spec changed since the last check"}.get(self.preflight_state,
                                                                         self.preflight_state)
        body = Text()
        body.append(self._summary()).append("\n\n")
        body.append("Derived: ", "bold").append(", ".join(f"{k}={v}" for k, v in list(self.derived.items())[:8]))
        body.append("\nWarnings: ", "bold").append(str(len(warnings)) + "".join(f"\n  ! {w.message}" for w in warnings))
        body.append("\nPreflight: ", "bold").append(pf)
        for f in self.preflight_findings:
            body.append(f"\n  {f.severity}: {f.message}")
        body.append("\n\nThe run lives in Ray: closing the console never stops it.", "dim")
        return body

    def _launch(self, spec: Any) -> None:
        self.notify("launching…")
        self._launch_worker(spec)

    @work(exclusive=True, group="launch", exit_on_error=False)
    async def _launch_worker(self, spec: Any) -> None:
        """Submit through backend.run.RunController (set on the app by console.workers)."""
        import os

        from backend.command import new_run_id, secrets_from_env

        app = self.app
        controller = getattr(app, "controller", None)
        if controller is None or not hasattr(controller, "launch"):
            app.post_message(Notice("launch is not available: no run controller is connected "
                                    "(start the console without a subcommand, or `ultra-console demo`)", "error"))
            return
        checked = self.findings + self.preflight_findings if self.preflight_state == "passed" else None
        try:
            result = controller.launch(spec, run_id=getattr(app, "preview_run_id", None),
                                       secrets=secrets_from_env(os.environ), findings=checked)
            if inspect.isawaitable(result):
                result = await result
        except ConsoleError as err:
            app.post_message(Notice(f"launch failed: {err}", "error"))
            app.post_message(AuditChanged())
            return
        app.preview_run_id = new_run_id()  # type: ignore[attr-defined]  # the next launch is a new run
        self.rebuild()
        app.post_message(Notice(f"launched {getattr(result, 'id', '') or 'the run'}; showing the run view"))
        app.post_message(AuditChanged())
        app.action_show_view("run")  # type: ignore[attr-defined]
