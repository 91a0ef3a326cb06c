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


def test_while_history_is_read_the_charts_are_posted_at_most_every_two_seconds(
    tmp_path: Path, monkeypatch
) -> None:
    """A replay shares the interpreter with its UI: the charts redraw at HISTORY_METRICS_EVERY_S while the log
    is read (METRICS_EVERY_S once a session is live), and the end of the read is posted at once."""
    from backend.demo import sample_log
    from console import workers
    from console.messages import MetricsArrived

    log = tmp_path / "job.log"
    sample_log.write(log, sample_log.SampleRun(rollouts=3, noise_per_rollout=4))
    replay = ReplaySession(source_of(str(log)), tmp_path / "spool")
    replay.read_all()
    app = _App()
    session = OfflineSession(app, replay)  # type: ignore[arg-type]
    now = [1000.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: now[0])
    monitor = replay.monitor
    assert monitor is not None

    def posts_at(t: float) -> int:
        now[0] = t
        monitor.collector.records["step"] = monitor.collector.records.get("step", 0) + 1  # news each time
        before = sum(isinstance(m, MetricsArrived) for m in app.posted)
        session.maybe_post_metrics()
        return sum(isinstance(m, MetricsArrived) for m in app.posted) - before

    assert [posts_at(t) for t in (1000.0, 1000.6, 1001.5, 1002.05, 1003.5)] == [1, 0, 0, 1, 0]
    session.live = True  # an attached run once its history is in: twice a second
    assert [posts_at(t) for t in (1003.6, 1004.2)] == [1, 1]
    now[0] = 1004.3
    monitor.collector.records["step"] += 1
    before = len(app.posted)
    session.maybe_post_metrics(force=True)  # the end of a read: at once
    assert any(isinstance(m, MetricsArrived) for m in app.posted[before:])
