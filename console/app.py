"""The Textual app: a state line, four views in a ContentSwitcher, a footer of keymap bindings.

The app owns routing only: view switching (1-4, Tab), Esc, help, the palette, quit, the
dashboard-lost banner, read-only refusal and the TTY watchdog. Views draw what backend computes;
workers (console/workers.py) do all Ray I/O and post console.messages to the app, which
handles what it needs and fans each message out to every view.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.message import Message
from textual.widget import AwaitMount, Widget
from textual.widgets import ContentSwitcher, Static

from backend.errors import SpecError
from backend.plan.preview_process import PreviewBasics, PreviewRefused
from backend.plan.run_id import new_run_id
from backend.redaction import public_line
from console import keymap
from console.host import ConsoleHost
from console.key_order import KeyHandled, KeyOrder
from console.messages import (
    AlertsChanged,
    ConsoleMessage,
    DashboardBack,
    DashboardLost,
    FleetWanted,
    HistoryProgress,
    Notice,
    RolloutCursor,
    RunStateChanged,
    SinceLastLooked,
    TerminalAlert,
)
from console.palette import KeymapCommands
from console.views.base import ConsoleView
from console.views.plan import PlanView
from console.watchdog import terminal_alive
from console.widgets.help_screen import HelpScreen
from console.widgets.key_bar import KeyBar

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from backend.cluster.controller import RunController
    from backend.plan.preview_process import Preview
    from backend.plan.view_start import PlanStart
    from backend.settings import Settings
    from backend.signals.replay import ReplaySession

VIEW_TITLES: dict[str, str] = {"plan": "Plan", "run": "Run", "logs": "Logs", "events": "Events"}
ACTIVE_RUN_STATES = frozenset({"PENDING", "RUNNING", "STOPPING"})  # SUBMITTING: a launch from the plan view
FIRST_FRAME_FALLBACK_S = 2.0  # the later views mount and the workers start by then in any case
COMPACT_BELOW = (100, 32)  # width, height under which the denser layout is used
WIDE_FROM = 180  # columns from which views may spread out side by side
WATCHDOG_INTERVAL_S = 2.0
QUIT_LINE = "ultra-console: console closed; the run keeps going on Ray. Run `ultra-console` to attach again."


class Unavailable(ConsoleView):
    """Stands in for a view that a replay has no use for (the plan view: nothing to plan or launch)."""

    DEFAULT_CSS = "Unavailable { align: center middle; color: $text-muted; }"

    def __init__(self, title: str, note: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._title = title
        self._note = note

    def compose(self) -> ComposeResult:
        yield Static(f"{self._title} view: {self._note}", markup=False)


def _later_views() -> dict[str, type[ConsoleView]]:
    """The views other than the first, mounted just after the first full frame (or at once when one is asked
    for before that; they start hidden anyway)."""
    # Imported here, after the first frame: ~230 more modules, ~0.35 s of CPU (the Run view's comparison
    # brings httpx and the cluster client), about what a bare Textual app takes to draw: more than the
    # 1.5x budget leaves.
    from console.views.events import EventsView
    from console.views.logs import LogsView
    from console.views.run import RunView

    return {"run": RunView, "logs": LogsView, "events": EventsView}


class StateLine(Static):
    """Top line: product, DEMO / READ-ONLY marks, the view tabs, run state, alerts, dashboard."""

    DEFAULT_CSS = """
    StateLine { dock: top; height: 1; background: $panel; color: $foreground; padding: 0 1; }
    """

    _drawn = ""

    def draw(self, app: UltraConsoleApp) -> None:
        text = Text()
        text.append("ultra-console", "bold")
        _append_mode(text, app)
        text.append("  ")
        for i, (name, title) in enumerate(VIEW_TITLES.items(), 1):
            style = "bold reverse" if name == app.current_view else "dim"
            text.append(f" {i} {title} ", style)
        _append_run(text, app)
        if text.markup != self._drawn:  # Textual would resend an identical line
            self._drawn = text.markup
            self.update(text, layout=False)


def _append_mode(text: Text, app: UltraConsoleApp) -> None:
    """The badges that say this is not a writable console on a real cluster: demo, replay, read-only."""
    if app.demo:
        text.append(" DEMO ", "bold reverse magenta")
    if app.replay is not None:
        text.append(" REPLAY ", "bold reverse cyan")
    elif app.readonly:
        text.append(" READ-ONLY ", "bold reverse yellow")


def _append_run(text: Text, app: UltraConsoleApp) -> None:
    """The run's state, the history note, the alert count and a lost dashboard."""
    text.append("  run: ", "dim").append(app.run_state_text or "none")
    if app.history_text:
        text.append(f"  {app.history_text}", "yellow")
    if app.alert_count:
        text.append("  alerts: ", "dim").append(str(app.alert_count), "bold red")
    if app.dashboard_error is not None:
        text.append("  dashboard: ", "dim").append("LOST", "bold red")


class UltraConsoleApp(ConsoleHost):
    """`ultra-console` with no subcommand."""

    CSS_PATH = "app.tcss"
    TITLE = "ultra-console"
    BINDINGS: ClassVar[list[BindingType]] = keymap.bindings_for(keymap.APP)
    COMMANDS: ClassVar[set[Any]] = App.COMMANDS | {KeymapCommands}
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        job: str | None = None,
        demo: bool = False,
        start_workers: bool = True,
        watchdog: bool = True,
        preview_run_id: str | None = None,
        controller: RunController | None = None,
        model_dir: str | None = None,
        preview: Preview | None = None,
        overrides: dict[str, Any] | None = None,
        replay: ReplaySession | None = None,
        compare: Sequence[str] = (),
    ) -> None:
        """preview: a backend.plan.preview_process.Preview whose settings_answer() answered; with it and no
        `settings`, the settings are loaded (with `overrides`, the CLI flags) after the first frame, and the
        plan view starts from the preview's plan. replay: a backend.signals.replay.ReplaySession; the app then
        opens on its log, read-only, and talks to no cluster (console/replay.py feeds it). compare: runs
        (paths or job ids) the replay overlays on its charts once its own log is read (`replay A B C`)."""
        super().__init__()
        self.replay = replay
        self.compare_targets = tuple(compare)
        self.model_dir = model_dir  # where the variant picker looks for checkpoints; None = the preset's
        self._settings = settings
        self._overrides = overrides or {}
        self._preview = None
        answer = preview.settings_answer() if settings is None and preview is not None else None
        basis: Settings | PreviewBasics
        if isinstance(answer, PreviewBasics):
            self._preview = preview
            basis = answer
            preview_run_id = answer.run_id  # the one its command preview holds
        else:
            basis = self.settings
        self.readonly = basis.readonly or replay is not None
        self.job = job
        self.demo = demo
        self.controller = controller
        self.session = None
        self.fleet_wanted = False
        self._start_workers = start_workers
        self._watchdog = watchdog
        if preview_run_id is None:
            preview_run_id = new_run_id()
        self.preview_run_id = preview_run_id
        self.current_view = "logs" if replay is not None else "plan"
        self.rollout_cursor: int | None = None  # the rollout `[` / `]` stepped to
        self.previous_view: str | None = None
        self._run_seen = False  # the first run state tells whether the console opened on an active run
        self.run_state_text = ""
        self.history_text = ""  # "reading history: N lines" while a job's log is rebuilt
        self.alert_count = 0
        self.dashboard_error: str | None = None
        self.keymap_overrides, self._keymap_problems = keymap.validate_keymap(basis.keys)
        self._parent_pid = os.getppid()
        self._views: dict[str, Widget] = {}  # every view, created on first use; mounted or about to be
        self._later_mounted = False
        self._first_view = self.current_view
        self._after_first_frame_done = False
        self._key_order = KeyOrder(self, self._route_key)

    def preview_plan(self) -> PlanStart | None:
        """The preview helper's PlanStart (waited for here, when the plan view is composed), or None:
        the plan view then computes it."""
        preview, self._preview = self._preview, None
        return preview.plan() if preview is not None else None

    @property
    def settings(self) -> Settings:
        """The operator's settings (loaded on first use when the app started from a preview)."""
        if self._settings is None:
            from backend.settings import load_settings  # lazy: pydantic (console_frame.py)

            self._settings = load_settings(**self._overrides)
        return self._settings

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        self._apply_density(self.size.width, self.size.height)  # before mounting: no restyle of it all
        yield StateLine(id="state-line")
        yield Static("", id="banner", markup=False)
        with ContentSwitcher(initial=self.current_view, id="views"):
            yield self._view_widget(self.current_view)
        yield KeyBar(self.first_frame_drawn, id="footer")

    async def on_mount(self) -> None:
        self.set_keymap(self.keymap_overrides)
        for problem in self._keymap_problems:
            self.notify(problem, severity="warning")
        self._draw_state_line()
        self._focus_view(self.current_view, now=True)
        if not self.is_headless and not self.is_web:
            self._exit_cleanly_on_signals()
        if self._watchdog and not self.is_headless and not self.is_web:
            self._arm_watchdog()
        self.set_timer(FIRST_FRAME_FALLBACK_S, self.first_frame_drawn)  # if the key bar never got to draw

    def first_frame_drawn(self) -> None:
        """The first full frame is on the terminal: now mount the hidden views and start the workers."""
        if self._after_first_frame_done or not self.is_running:
            return
        self._after_first_frame_done = True
        self.mount_later_views()
        plan = self.view("plan")
        if isinstance(plan, PlanView):
            plan.build_spec_after_first_frame()
        # Imported here, after the first frame: the workers' I/O stack (httpx, the run controller, the log
        # store, the monitor): ~200 more modules, ~0.3 s of CPU on its own; the first frame never waits.
        if self.replay is not None:
            from console.replay import start

            start(self, self.replay)
        elif self._start_workers:
            from console.workers import start_workers

            start_workers(self)

    def _view_widget(self, name: str) -> Widget:
        """The view called `name`, created (its module imported) on first use."""
        widget = self._views.get(name)
        if widget is None:
            if name == "plan" and self.replay is not None:
                widget = Unavailable("Plan", "a replay has nothing to plan or launch", id=name)
            elif name == "plan":
                widget = PlanView(self.preview_plan, id=name)
            elif name == "logs" and self.replay is not None:
                from console.views.logs import LogsView  # lazy as in _later_views (a replay opens on its log)

                widget = LogsView(self.replay.store, id=name)
            else:
                widget = _later_views()[name](id=name)
            if name != self.current_view:
                widget.display = False  # ContentSwitcher hides only the children it starts with
            self._views[name] = widget
        return widget

    def mount_later_views(self) -> AwaitMount | None:
        """Mount the views after the first (an AwaitMount), or None when they already are."""
        if self._later_mounted:
            return None
        self._later_mounted = True
        widgets = [self._view_widget(name) for name in VIEW_TITLES if name != self._first_view]
        for widget in widgets:
            widget.display = widget.id == self.current_view
        return self.query_one("#views", ContentSwitcher).mount_all(widgets)

    def on_resize(self, event: events.Resize) -> None:
        self._apply_density(event.size.width, event.size.height)

    def _apply_density(self, width: int, height: int) -> None:
        compact = width < COMPACT_BELOW[0] or height < COMPACT_BELOW[1]
        self.set_class(compact, "-compact")
        self.set_class(not compact and width >= WIDE_FROM, "-wide")

    def view(self, name: str) -> Widget:
        """The view widget (it may not be mounted yet in the first moments: messages to it queue)."""
        return self._view_widget(name)

    def _draw_state_line(self) -> None:
        self.query_one(StateLine).draw(self)

    def _focus_view(self, name: str, *, now: bool = False) -> None:
        view = self.view(name)
        target = view if view.can_focus else next((w for w in view.query("*") if w.focusable), None)
        if target is None:
            return
        if now:
            self.screen.set_focus(target)
        else:
            target.focus()

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("cycle_view", "show_view") and len(self.screen_stack) > 1:
            return False  # a modal is up: Tab belongs to it
        return True

    def action_show_view(self, name: str) -> None:
        if name not in VIEW_TITLES:
            return
        mounting = self.mount_later_views()
        changed = name != self.current_view
        if changed:
            self.previous_view = self.current_view
            self.current_view = name
            self.query_one(ContentSwitcher).current = name
            self._draw_state_line()
            if mounting is None:
                self._view_shown(name)
        if mounting is None:
            self._focus_view(name)
        else:  # asked for before the first frame was drawn: finish once the views are mounted
            self.call_next(self._show_when_mounted, name, changed, mounting)

    async def _show_when_mounted(self, name: str, changed: bool, mounting: AwaitMount) -> None:
        await mounting
        if name == self.current_view:
            if changed:
                self._view_shown(name)
            self._focus_view(name)

    def _view_shown(self, name: str) -> None:
        view = self.view(name)
        if isinstance(view, ConsoleView):
            view.view_shown()

    def action_rollout_step(self, delta: int) -> None:
        """`[` / `]`: move the rollout cursor; the charts mark
        it and the log jumps to the rollout's first line."""
        index = self.session.rollouts if self.session is not None else None
        mark = index.step(self.rollout_cursor, delta) if index is not None else None
        if mark is None:
            self.notify("no rollout in the log yet", severity="warning", timeout=2)
            return
        self.rollout_cursor = mark.n
        self.post_message(RolloutCursor(mark))

    def action_cycle_view(self, step: int) -> None:
        names = list(VIEW_TITLES)
        self.action_show_view(names[(names.index(self.current_view) + step) % len(names)])

    async def action_back(self) -> None:
        """Esc: leave a field (focus goes back to the view), else return to the previous view."""
        view = self.view(self.current_view)
        focused = self.focused
        if focused is not None and focused is not view:
            if view.can_focus:
                self.screen.set_focus(view)  # at once: a key typed right after Esc must not reach the field
                return
        if self.previous_view:
            self.action_show_view(self.previous_view)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.keymap_overrides, self.readonly))

    async def run_binding(self, binding_id: str) -> None:
        """Run a keymap action by id (the palette's entry point): switch to its view, then act."""
        spec = next((s for s in keymap.specs() if s.id == binding_id), None)
        if spec is None:
            return
        scope = keymap.scope_of(binding_id)
        if spec.mutates and self.readonly:
            self.notify(f"read-only console: {spec.description.lower()} is refused", severity="warning")
            return
        if scope == keymap.APP:
            await self.run_action(spec.action)
            return
        if scope in VIEW_TITLES:
            self.action_show_view(scope)
            await self.view(scope).run_action(spec.action)  # the action itself says why it refuses

    # ------------------------------------------------------------------ worker messages

    async def on_event(self, event: events.Event) -> None:
        """A key from the terminal waits for the one before it to be handled (console/key_order.py)."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            await self._key_order.arrive(event)
            return
        await super().on_event(event)

    async def _route_key(self, event: events.Key) -> Widget:
        """As Textual routes a key (priority bindings, else the focused widget), the field committing first
        when the key is a binding's; answers the widget it went to."""
        self._key_order.commit_before_binding(event)
        target = self.focused or self.screen
        await super().on_event(event)
        return target

    def on_key_handled(self, message: KeyHandled) -> None:
        message.stop()
        self._key_order.marker(message.serial)

    async def _on_message(self, message: Message) -> None:
        """Worker messages still queued when the app shuts down are dropped (the views are gone)."""
        if isinstance(message, ConsoleMessage) and not self.is_running:
            return
        await super()._on_message(message)

    @on(ConsoleMessage)
    def _fan_out(self, message: ConsoleMessage) -> None:
        for name in VIEW_TITLES:
            self.view(name).post_message(message)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every toast (the views' too: Widget.notify lands here) is text from elsewhere until proven
        otherwise: secrets redacted, escape sequences and controls removed, one line, never markup."""
        super().notify(
            public_line(message), title=public_line(title), severity=severity, timeout=timeout, markup=False
        )

    def on_dashboard_lost(self, message: DashboardLost) -> None:
        """Shown the latest fault's words: every worker posts again when its fault's text changes."""
        self.dashboard_error = public_line(message.error_text)
        banner = self.query_one("#banner", Static)
        banner.update(
            f"⚠ {self.dashboard_error} — retrying by itself; the run is not affected and "
            "the console keeps working."
        )
        banner.add_class("-shown")
        self._draw_state_line()

    def on_dashboard_back(self, _message: DashboardBack) -> None:
        if self.dashboard_error is None:
            return
        self.dashboard_error = None
        self.query_one("#banner", Static).remove_class("-shown")
        self.notify("Ray dashboard reachable again")
        self._draw_state_line()

    def on_run_state_changed(self, message: RunStateChanged) -> None:
        self.run_state_text = message.state.label
        self._draw_state_line()
        first, self._run_seen = not self._run_seen, True
        if (
            first
            and message.state.phase in ACTIVE_RUN_STATES
            and self.current_view == "plan"
            and self.previous_view is None
        ):
            self.action_show_view("run")  # opened while a run is active: its view first, not a new plan

    def on_history_progress(self, message: HistoryProgress) -> None:
        self.history_text = "" if message.done else f"reading history: {message.lines:,} lines"
        self._draw_state_line()

    def on_fleet_wanted(self, message: FleetWanted) -> None:
        self.fleet_wanted = message.wanted

    def on_alerts_changed(self, message: AlertsChanged) -> None:
        self.alert_count = len(message.alerts)
        self._draw_state_line()

    def on_notice(self, message: Notice) -> None:
        self.notify(message.text, severity=message.severity.notice_level)

    def on_since_last_looked(self, message: SinceLastLooked) -> None:
        """On attach: what the run's watcher saw while nobody looked (the whole list is in Events)."""
        causes = [line for line in message.lines if "cause of death" in line]
        text = message.lines[0] + (f"; {causes[-1].strip()}" if causes else "") + " (4 Events)"
        self.notify(text, severity=message.severity.notice_level, timeout=20)

    def on_terminal_alert(self, message: TerminalAlert) -> None:
        """A critical alert is news: the bell, and a desktop notification of our own words (never a line of
        the log), only on a terminal of our own (console/terminal_alerts.py)."""
        from console import terminal_alerts  # after the first frame (it imports the settings' pydantic)

        mode = terminal_alerts.resolve(self.settings.terminal_notify, os.environ)
        if mode == "off" or not self._terminal_is_ours():
            return
        self.bell()
        title, body = terminal_alerts.message_for(list(message.ids), message.run)
        sequence = terminal_alerts.notification(mode, title, body, os.environ)
        if sequence:
            self._write_terminal(sequence)

    def _terminal_is_ours(self) -> bool:
        """A real terminal the app drives (not a test's headless driver, not a browser through serve)."""
        return not (self.is_headless or self.is_web) and bool(sys.__stdout__ and sys.__stdout__.isatty())

    def _write_terminal(self, sequence: str) -> None:
        driver = self._driver
        if driver is not None:
            driver.write(sequence)

    # ------------------------------------------------------------------ terminal watchdog

    def _exit_cleanly_on_signals(self) -> None:
        """SIGTERM and SIGQUIT end the app through Textual's own exit, which gives the terminal back (main
        screen, no mouse tracking, cursor shown); Python's default would die with the terminal still ours."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGQUIT):
            try:
                loop.add_signal_handler(sig, functools.partial(self.exit, 128 + sig, return_code=128 + sig))
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _arm_watchdog(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._hangup)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        self.set_interval(WATCHDOG_INTERVAL_S, self._check_terminal, name="tty-watchdog")

    def _check_terminal(self) -> None:
        fd = sys.__stdout__.fileno() if sys.__stdout__ else 1
        if not terminal_alive(fd, self._parent_pid):
            self._hangup()

    def _hangup(self) -> None:
        self.exit(0, message=None)


def run_app(args: argparse.Namespace, preview: Preview | None = None) -> int:
    """Open the app (`ultra-console` with no subcommand); prints that the run keeps going on exit.
    preview: a started backend.plan.preview_process.Preview; without its answer the app computes the plan."""
    overrides = {
        "address": getattr(args, "address", None),
        "token": getattr(args, "token", None),
        "readonly": getattr(args, "readonly", None),
    }
    answer = preview.settings_answer() if preview is not None else None
    if isinstance(answer, PreviewRefused):
        raise SpecError(answer.error)  # the settings are bad: one line, as load_settings says it
    # Without a usable answer the app loads the settings itself (a bad config raises here, before Textual).
    app = UltraConsoleApp(
        None,
        job=getattr(args, "job", None),
        demo=bool(getattr(args, "demo", False)),
        controller=getattr(args, "controller", None),
        preview=preview,
        overrides=overrides,
    )
    code = app.run()
    if sys.stdout.isatty() or os.environ.get("ULTRA_CONSOLE_QUIT_LINE"):
        try:
            print(QUIT_LINE)
        except OSError:
            pass  # the terminal is gone (hang-up): nothing to tell
    return int(code or 0)
