"""The per-rank phase timeline (Pilot and snapshots) from a phases stream whose closes arrive late, with 128
ranks on 16 nodes: one lane per rank at 200x50, one lane per node at 80x24; and the stacks screen."""

from __future__ import annotations

import asyncio

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static
from waiting import until

from backend.cluster.stack_groups import ProcessStack, StacksReport, Unreadable, parse_process
from backend.severity import Severity
from backend.signals.dump_reader import PhaseEvent
from backend.signals.rank_phases import PhaseView, RankPhases
from console.widgets.phase_timeline import PhaseTimeline, render_timeline
from console.widgets.stacks_screen import StacksScreen

NOW = 1_800_000_300.0
RANKS, PER_NODE = 128, 8


def phase_view() -> PhaseView:
    """Four 60 s steps (actor_train 40 s, update_weights 10 s) on 128 ranks; every close arrives after the
    next step's open (miles batches closes); rank 97 is 15 s late each step and is stuck in `recv`-like
    train_wait since the last step began."""
    phases = RankPhases()
    events = []
    for step in range(5):
        t0 = NOW - 280 + step * 60
        for r in range(RANKS):
            node = f"10.0.0.{r // PER_NODE}"
            late = 15.0 if r == 97 else 0.0
            events.append(
                ({"name": "actor_train", "t0": t0, "t1": -1.0, "node": node, "rank": r, "role": "train"}, t0)
            )
            if step < 4:
                events.append(
                    (
                        {
                            "name": "actor_train",
                            "t0": t0,
                            "t1": t0 + 40 + late,
                            "node": node,
                            "rank": r,
                            "role": "train",
                        },
                        t0 + 60.5,
                    )
                )  # arrives after the next step's open
                events.append(
                    (
                        {
                            "name": "update_weights",
                            "t0": t0 + 40 + late,
                            "t1": t0 + 50 + late,
                            "node": node,
                            "rank": r,
                            "role": "train",
                        },
                        t0 + 61,
                    )
                )
    events.append(
        (
            {
                "name": "rollout",
                "t0": NOW - 290,
                "t1": -1.0,
                "node": "10.0.0.0",
                "rank": -1,
                "role": "rollout_manager",
            },
            NOW - 290,
        )
    )
    for event, _arrives in sorted(events, key=lambda e: e[1]):
        phases.add_event(PhaseEvent.from_json(event))
    return phases.view()


class TimelineApp(App[None]):
    def compose(self) -> ComposeResult:
        yield PhaseTimeline(lambda: NOW, id="timeline")

    def on_mount(self) -> None:
        self.query_one(PhaseTimeline).update_view(phase_view())


def test_late_closes_leave_every_rank_in_its_new_phase() -> None:
    view = phase_view()
    lanes = {lane.rank: lane for lane in view.lanes}
    assert len(lanes) == RANKS + 1
    assert all(lanes[r].current == "actor_train" and lanes[r].since == NOW - 40 for r in range(RANKS))


@pytest.mark.parametrize("size", [(200, 50), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_timeline_fits_128_ranks(size: tuple[int, int]) -> None:
    app = TimelineApp()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        widget = app.query_one(PhaseTimeline)
        text = render_timeline(widget.view, NOW, widget.size.width, widget.size.height).plain
        lines = text.splitlines()
        assert len(lines) <= size[1] and all(len(line) <= size[0] for line in lines)
        assert "128 rank(s) on 16 node(s)" in lines[0]
        if size == (200, 50):
            assert all(f"{r // PER_NODE}:{r} " in text for r in range(RANKS))  # one lane per rank
            assert text.count("actor_train 40s") == RANKS
        else:
            assert sum(1 for line in lines if "×" in line) == 16  # one aggregated lane per node
            assert "8/8 actor_train 40s" in text


@pytest.mark.parametrize("size", [(200, 50), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_timeline_snapshot(snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(TimelineApp(), terminal_size=size)


def stacks_report() -> StacksReport:
    def item(pid: int, inner: str) -> dict:
        frames = [
            {"name": n, "file": "train.py", "line": 3}
            for n in (inner, "train_step", "MegatronTrainRayActor.train")
        ]
        return {
            "pid": pid,
            "cmd": "ray::MegatronTrainRayActor.train",
            "threads": [{"name": "MainThread", "tid": pid, "frames": frames}],
        }

    procs = [
        _stack(parse_process(f"n{p % 3}", f"node-{p % 3}", item(p, "allreduce"), {})) for p in range(100, 107)
    ]
    odd = _stack(parse_process("n2", "node-2", item(4411, "recv"), {4411: 97}))
    return StacksReport.build(
        "raysubmit_1",
        NOW,
        [*procs, odd],
        nodes_asked=4,
        seconds=3.2,
        saved_to="/state/stacks/raysubmit_1.txt",
        unreadable=(Unreadable("n1", "node-1", 55, "ray::X", "ptrace", "EPERM: ptrace refused"),),
        failed_nodes=(parse_failure(),),
    )


def _stack(parsed: ProcessStack | Unreadable) -> ProcessStack:
    assert isinstance(parsed, ProcessStack), parsed
    return parsed


def parse_failure():
    from backend.cluster.stack_groups import NodeFailure

    return NodeFailure("n3", "node-3", "no answer in 60 s (its stacks job was still PENDING; stopped)")


async def test_stacks_screen_lists_small_groups_first_and_opens_the_odd_stack() -> None:
    answered = asyncio.Event()

    async def collect(progress) -> StacksReport:
        progress("1/2 nodes answered (3 s): node-2: 8 process(es)")  # what backend.cluster.stacks says
        await answered.wait()
        return stacks_report()

    app = App[None]()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(StacksScreen("raysubmit_1", collect))
        screen = app.screen
        summary = screen.query_one("#stacks-summary", Static)
        await until(pilot, lambda: "1/2 nodes answered" in str(summary.content), "the per-node progress")
        answered.set()
        await until(
            pilot, lambda: isinstance(screen, StacksScreen) and screen.report is not None, "the report"
        )
        await pilot.pause()
        from textual.widgets import OptionList

        options = screen.query_one(OptionList)
        first = str(options.get_option_at_index(0).prompt)
        assert first.startswith("1 rank (node node-2, rank 97, MegatronTrainRayActor pid 4411): recv")
        assert str(options.get_option_at_index(1).prompt).startswith("7 processes: allreduce")
        problems = [str(options.get_option_at_index(i).prompt) for i in range(2, options.option_count)]
        assert any("EPERM: ptrace refused" in p for p in problems)
        assert any("node node-3: no answer in 60 s" in p for p in problems)
        detail = str(screen.query_one("#stacks-stack", Static).content)
        assert "recv (train.py:3)" in detail
        assert "/state/stacks/raysubmit_1.txt" in str(screen.query_one("#stacks-saved", Static).content)
        await pilot.press("down")
        await pilot.pause()
        assert "allreduce (train.py:3)" in str(screen.query_one("#stacks-stack", Static).content)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)


class StacksApp(App[None]):
    """The stacks screen over a recorded report (the groups, an unreadable process, a silent node)."""

    async def on_mount(self) -> None:
        async def collect(_progress) -> StacksReport:
            return stacks_report()

        await self.push_screen(StacksScreen("raysubmit_1", collect))


@pytest.mark.parametrize("size", [(200, 50), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_stacks_screen_snapshot(snap_compare, size: tuple[int, int]) -> None:
    async def report_drawn(pilot) -> None:
        screen = pilot.app.screen
        await until(
            pilot, lambda: isinstance(screen, StacksScreen) and screen.report is not None, "the report"
        )
        await pilot.pause()

    assert snap_compare(StacksApp(), terminal_size=size, run_before=report_drawn)


async def test_the_hang_alert_offers_stacks_once_and_T_opens_the_timeline(tmp_path) -> None:
    from app_helpers import make_app

    from backend.signals.alerts import Alert
    from console.messages import AlertsChanged
    from console.widgets.phase_timeline import PhasesScreen

    app = make_app(tmp_path, keys={"run.stacks": "ctrl+s"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        hang = Alert("rank-hang", Severity.CRITICAL, "no progress for 6 min", action="stacks")
        app.post_message(AlertsChanged([hang]))
        app.post_message(AlertsChanged([hang]))
        offers = lambda: [n for n in app._notifications if "every rank's stack" in n.message]  # noqa: E731
        await until(pilot, offers, "the stacks offer")
        await pilot.pause()
        assert len(offers()) == 1 and "press ctrl+s in the Run view" in offers()[0].message
        await pilot.press("T")
        await until(pilot, lambda: isinstance(app.screen, PhasesScreen), "the timeline screen")
        assert "no per-rank phases yet" in str(app.screen.query_one(PhaseTimeline).render())
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, PhasesScreen), "back to the run view")
