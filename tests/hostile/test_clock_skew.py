"""Hostile input, round 2 (issue 36): clocks. A node an hour ahead, or a message holding a future time, is
measured and said (clock-skew), never taken for "now": the live stall alarm runs on the console's own clock
from when the newest metric arrived."""

from __future__ import annotations

from backend.signals.monitor import RunMonitor

TRAIN = "(MegatronTrainRayActor pid=21, ip=10.0.0.1)"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _step(step: int, stamp: str) -> str:
    body = f"{{'train/loss': 0.5, 'train/ppo_kl': 0.001, 'train/step': {step}}}"
    return f"{TRAIN} [2026-03-02 {stamp}] log_utils.py:443 - step {step}: {body}\n"


def _ids(monitor: RunMonitor) -> list[str]:
    return [a.id for a in monitor.alerts.alerts]


def test_one_line_an_hour_ahead_raises_no_stall_and_is_said_as_skew() -> None:
    clock = Clock()
    monitor = RunMonitor(clock=clock)
    for step in range(3):  # a healthy run: a step every 10 s
        monitor.feed_text(_step(step, f"10:00:{step * 10:02d}"))
        clock.now += 10
    # one node's clock runs an hour ahead (or a message prints its own future time)
    monitor.feed_text(f"{TRAIN} [2026-03-02 11:00:30] train_actor.py:53 - heartbeat\n")
    for step in range(3, 40):  # the run goes on, ten minutes of it, ticked as the app does
        clock.now += 10
        monitor.feed_text(_step(step, f"10:{(step * 10) // 60:02d}:{(step * 10) % 60:02d}"))
        monitor.tick()
    assert "run-stalled" not in _ids(monitor), monitor.alerts.alerts
    skew = [a for a in monitor.alerts.alerts if a.id == "clock-skew"]
    assert len(skew) == 1 and "60" in skew[0].message and monitor.skew_ahead_s > 3500
    assert "11:00:30" in skew[0].sample and "pid=21, ip=10.0.0.1" in skew[0].sample  # the line, its node


def test_the_live_stall_is_measured_on_the_consoles_clock_since_the_last_metric_arrived() -> None:
    clock = Clock()
    monitor = RunMonitor(clock=clock)
    monitor.feed_text(_step(0, "10:00:00"))
    monitor.feed_text(_step(1, "10:00:10"))
    clock.now += 25 * 60
    # lines keep coming, stamped as if time stood still: the console's clock says 25 min, not 0
    monitor.feed_text(f"{TRAIN} [2026-03-02 10:00:10] train_actor.py:53 - waiting\n")
    monitor.tick()
    assert "run-stalled" not in _ids(monitor)
    clock.now += 6 * 60
    monitor.tick()
    stalled = [a for a in monitor.alerts.alerts if a.id == "run-stalled"]
    assert len(stalled) == 1 and "31 min" in stalled[0].message
