"""Per-rank phases: late closes matched by t0, rounds across ranks, stragglers and the no-progress hang."""

from __future__ import annotations

import math

from backend.signals.alerts import AlertEngine
from backend.signals.derived import DashboardStreams
from backend.signals.dump_reader import DumpBatch, PhaseEvent
from backend.signals.rank_phases import RankPhases


def ev(name: str, t0: float, t1: float, rank: int, node: str = "10.0.0.1") -> PhaseEvent:
    """A `phases` stream line as miles writes it, read as the dump reader reads it."""
    line = {"name": name, "t0": t0, "t1": t1, "node": node, "gpus": [rank % 8], "rank": rank, "role": "train"}
    return PhaseEvent.from_json(line)


def test_a_close_arriving_after_the_next_open_leaves_the_new_phase_open() -> None:
    """miles sends opens at once and closes in batches: step 2's open can come before step 1's close.
    The old Telemetry class cleared the open phase on any close of that name (this assertion failed there)."""
    tel = DashboardStreams()
    tel.add(
        DumpBatch(
            phases=[
                ev("actor_train", 100.0, -1.0, 3),
                ev("actor_train", 110.0, -1.0, 3),
                ev("actor_train", 100.0, 109.0, 3),
            ]
        )
    )
    assert tel.open_phases == {("10.0.0.1", 3, "train", "actor_train"): 110.0}
    assert tel.ranks.current(("10.0.0.1", 3, "train")) == ("actor_train", 110.0)
    lane = tel.ranks.view().lanes[0]
    assert [(s.t0, s.t1) for s in lane.spans if math.isfinite(s.t1)] == [(100.0, 109.0)]
    assert lane.current == "actor_train" and lane.since == 110.0


def test_log_timer_lines_with_a_rank_make_a_lane_when_no_dashboard_stream_exists() -> None:
    phases = RankPhases()
    phases.add_log_text(
        "(MegatronTrainRayActor pid=52001) [2026-08-21 10:20:00.000 actor_cell0_rank0] timer.py:30 - "
        "Timer actor_train start\n"
        "(MegatronTrainRayActor pid=52001) [2026-08-21 10:20:09.500 actor_cell0_rank0] timer.py:41 - "
        "Timer actor_train end (elapsed: 9.5s)\n"
    )
    view = phases.view()
    assert view.source == "log" and len(view.lanes) == 1
    assert view.lanes[0].rank == 0 and [s.t1 - s.t0 for s in view.lanes[0].spans] == [9.5]
    phases.add_event(ev("actor_train", 1.0, -1.0, 5))  # the dashboard speaks: it wins from now on
    phases.add_log_text(
        "(MegatronTrainRayActor pid=1) [2026-08-21 10:21:00.000 actor_cell0_rank0] timer.py:30 - "
        "Timer update_weights start\n"
    )
    assert phases.current(("10.0.0.1", 0, "train")) is None


def _steps(
    phases: RankPhases, *, ranks: int, steps: int, slow: int | None, late: float, start: float = 0.0
) -> None:
    for step in range(steps):
        t0 = start + step * 20.0
        for r in range(ranks):
            phases.add_event(ev("actor_train", t0 + 0.01 * r, -1.0, r))
        for r in range(ranks):
            phases.add_event(ev("actor_train", t0 + 0.01 * r, t0 + 10.0 + (late if r == slow else 0.0), r))


def test_a_rank_late_three_rounds_in_a_row_is_named_once() -> None:
    phases, engine = RankPhases(), AlertEngine()
    _steps(phases, ranks=8, steps=2, slow=5, late=8.0)
    assert engine.check_stragglers(phases) == []  # two late rounds: not yet
    _steps(phases, ranks=8, steps=3, slow=5, late=8.0, start=40.0)
    fired = engine.check_stragglers(phases)
    assert [a.id for a in fired] == ["rank-straggler"]
    assert "rank 5 on 10.0.0.1 is a straggler: its actor_train ended 8" in fired[0].message
    assert engine.check_stragglers(phases) == []


def test_jitter_below_the_threshold_is_not_a_straggler() -> None:
    phases, engine = RankPhases(), AlertEngine()
    _steps(phases, ranks=8, steps=6, slow=2, late=1.0)  # 1 s late on a 10 s phase: under max(5 s, 2 s)
    assert engine.check_stragglers(phases) == []


def test_no_progress_names_the_ranks_longest_in_one_phase_and_offers_stacks() -> None:
    phases, engine = RankPhases(), AlertEngine()
    _steps(phases, ranks=4, steps=2, slow=None, late=0.0)
    phases.add_event(ev("actor_train", 100.0, -1.0, 0))
    phases.add_event(ev("actor_train", 100.0, -1.0, 1))
    phases.add_event(ev("train_wait", 101.0, -1.0, 2))
    assert engine.check_no_progress(True, phases, 200.0, math.nan, 10.0) is None  # under min_s (300 s)
    alert = engine.check_no_progress(True, phases, 500.0, 450.0, 10.0)
    assert alert is not None and alert.id == "rank-hang" and alert.action == "stacks"
    assert "rank 0 on 10.0.0.1 in actor_train for 6.7 min" in alert.message
    assert "stacks" in alert.message and "`ultra-console collectives`" in alert.message
    assert engine.check_no_progress(True, phases, 500.0, 100.0, 10.0) is None  # a metric 100 s ago: progress
