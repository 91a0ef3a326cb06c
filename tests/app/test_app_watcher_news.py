"""What the console shows of the run's watcher: "since you last looked" on attach (a toast and the Events
view), and a critical alert's bell and desktop notification, written only to a terminal of its own and
only when the setting leaves it on."""

from __future__ import annotations

from pathlib import Path

from app_helpers import make_app
from textual.widgets import Static

from backend.settings import Settings
from backend.severity import Severity
from console.messages import SinceLastLooked, TerminalAlert

DATA = Path(__file__).resolve().parents[1] / "data" / "sim_fail"
LINES = (
    "since you last looked: 2 change(s)",
    "  2026-12-02 03:01:00  warning kl-spike raised: train/ppo_kl spiked",
    "  2026-12-02 03:04:00  cause of death: cuda-oom: CUDA out of memory — try: smaller micro batch",
)


async def test_since_you_last_looked_is_shown_on_attach(tmp_path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        app.post_message(SinceLastLooked("run-1", LINES, Severity.CRITICAL))
        await pilot.press("4")
        await pilot.pause()
        shown = str(app.query_one("#since", Static).content)
        assert "cause of death: cuda-oom" in shown and "kl-spike raised" in shown
        assert app.query_one("#since").display
        toasts = [str(n.message) for n in app._notifications]
        assert any("since you last looked" in t and "cuda-oom" in t for t in toasts), toasts


async def _rung(tmp_path, mode: str, ours: bool) -> tuple[list[str], int]:
    settings = Settings(state_dir=tmp_path, terminal_notify=mode)  # type: ignore[arg-type]
    app = make_app(tmp_path, settings)
    written: list[str] = []
    bells = [0]
    app._terminal_is_ours = lambda: ours  # type: ignore[method-assign]
    app._write_terminal = written.append  # type: ignore[method-assign,assignment]
    app.bell = lambda: bells.__setitem__(0, bells[0] + 1)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(TerminalAlert(["cuda-oom"], "run-1\x1b]0;pwned\x07"))
        await pilot.pause()
    return written, bells[0]


async def test_a_critical_alert_rings_and_notifies_only_a_terminal_of_its_own(tmp_path) -> None:
    written, bells = await _rung(tmp_path, "osc777", ours=True)
    assert bells == 1 and len(written) == 1
    assert written[0].startswith("\x1b]777;notify;ultra-console;critical cuda-oom (run run-1_")
    assert "pwned" in written[0] and "\x1b]0" not in written[0]  # the id's bytes, never its escape
    assert await _rung(tmp_path, "osc9", ours=False) == ([], 0)  # headless / a browser: nothing
    assert await _rung(tmp_path, "off", ours=True) == ([], 0)
    written, bells = await _rung(tmp_path, "bell", ours=True)
    assert bells == 1 and written == []


class _Host:
    """Just enough of the app for a ConsoleSession: its settings and a mailbox."""

    def __init__(self, tmp_path) -> None:
        self.settings = Settings(state_dir=tmp_path)
        self.controller = None
        self.is_running = True
        self.posted: list[object] = []

    def post_message(self, message: object) -> None:
        self.posted.append(message)


def test_what_the_history_raised_rings_nothing_and_what_comes_live_rings_once(tmp_path) -> None:
    from console.workers import ConsoleSession

    lines = (DATA / "train-oom.log").read_text(encoding="utf-8").splitlines(keepends=True)
    host = _Host(tmp_path)
    session = ConsoleSession(host)  # type: ignore[arg-type]
    for attempt in ("history", "live"):
        session.new_run_log(f"run-{attempt}")
        assert session.monitor is not None
        if attempt == "live":
            session.history_read()  # attached before the death: the OOM comes live
        session.monitor.feed_text("".join(lines))
        session.maybe_post_alerts()
        if attempt == "history":
            session.history_read()  # attached after it: it was in the history
            session._alerts_posted = -1  # as if a live line moved the alerts: the old ones are no news
            session.maybe_post_alerts()
    rung = [m for m in host.posted if isinstance(m, TerminalAlert)]
    assert [(m.run, "cuda-oom" in m.ids) for m in rung] == [("run-live", True)], rung
    session.maybe_post_alerts()
    assert len([m for m in host.posted if isinstance(m, TerminalAlert)]) == 1
