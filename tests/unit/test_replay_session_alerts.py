"""A replay's session posts its alerts like an attached run's, without the terminal news an attached run
says (CI: `replay` of a log with an alert stopped at its first chunk, 'reading history' for ever, because
the offline session lacked the attached session's `live` flag)."""

from __future__ import annotations

from pathlib import Path

from backend.signals.replay import ReplaySession, source_of
from console.messages import AlertsChanged, ConsoleMessage
from console.replay import OfflineSession

OOM_LOG = (
    "[2026-08-21 10:00:00.000 main] placement_group.py:113 - Creating placement group with 8 GPUs...\n"
    "(MegatronTrainRayActor pid=52001) torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB\n"
)


class _App:
    is_running = True

    def __init__(self) -> None:
        self.posted: list[ConsoleMessage] = []

    def post_message(self, message: ConsoleMessage) -> None:
        self.posted.append(message)


def test_a_replay_with_an_alert_posts_it_and_reads_on(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(OOM_LOG, encoding="utf-8")
    replay = ReplaySession(source_of(str(log)), tmp_path / "spool")
    replay.read_all()
    assert replay.monitor is not None and replay.monitor.alerts.version > 0
    app = _App()
    session = OfflineSession(app, replay)  # type: ignore[arg-type]
    session.progress(force=True)  # raised AttributeError ('live') before, ending the read
    alerts = [m for m in app.posted if isinstance(m, AlertsChanged)]
    assert alerts and alerts[-1].alerts


async def test_a_bug_in_the_read_is_said_in_one_line_and_the_read_so_far_kept(tmp_path: Path) -> None:
    from console import replay as replay_module
    from console.messages import HistoryProgress, Notice

    log = tmp_path / "job.log"
    log.write_text(OOM_LOG, encoding="utf-8")
    replay = ReplaySession(source_of(str(log)), tmp_path / "spool")

    def broken_step(_budget: int = 0) -> bool:
        raise KeyError("gpus\nsecond line")

    replay.load_step = broken_step  # type: ignore[method-assign,assignment]
    app = _App()
    app.compare_targets = []  # type: ignore[attr-defined]
    session = OfflineSession(app, replay)  # type: ignore[arg-type]
    await replay_module._load(session)
    said = [m.text for m in app.posted if isinstance(m, Notice)]
    assert any(t.startswith("replay stopped: internal error KeyError") and "\n" not in t for t in said), said
    assert any(
        isinstance(m, HistoryProgress) and m.done for m in app.posted
    )  # not "reading history" for ever
