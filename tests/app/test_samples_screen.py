"""The Samples screen (G in the Run view) over rollout files: the groups table, filters, sort, a group's
samples with the `</think>` boundary, `[` `]` across rollouts, a file that appears while it is open,
sanitised text; a replay over a dump dir; snapshots at 80x24 and 200x50. Update only after looking at
the SVGs: `pytest tests/app/test_samples_screen.py --snapshot-update`."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest
from app_helpers import make_app
from textual.widgets import DataTable, Static
from waiting import until

from backend.demo.rollout_dump import sample_record, write_rollout
from backend.settings import Settings
from backend.signals.monitor import RunMonitor
from backend.signals.replay import ReplaySession, RolloutIndex, detect_source
from console.app import UltraConsoleApp
from console.widgets.charts import LineChart
from console.widgets.samples_screen import SamplesScreen, scatter

DATA = Path(__file__).parent.parent / "data" / "rollout_data"
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]
EVIL = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J[bold red]not markup[/]\x9b31m"


def dump_with_rollouts(root: Path) -> Path:
    """Rollout 0 (the reference's example, written by miles) and rollout 1 (int rewards, a gap, a short
    group), and rollout 2: four groups of 4 with a hostile response."""
    dump = root / "dump"
    shutil.copytree(DATA / "miles_4x4", dump)
    shutil.copy(DATA / "miles_int_rewards" / "rollout_data" / "1.pt", dump / "rollout_data" / "1.pt")
    samples = []
    for g in range(4):
        for i in range(4):
            samples.append(
                sample_record(
                    20 + g,
                    80 + 4 * g + i,
                    prompt=f"<|im_start|>user\nHow many primes below {10 * (g + 1)}?<|im_end|>\n",
                    response=(f"Count them {EVIL} one by one. </think>\nThere are \\boxed{{{g + i}}}."),
                    response_length=100 * (g + 1) + 7 * i,
                    tokens=list(range(20 + 100 * (g + 1) + 7 * i)),
                    reward=1 if (g + i) % 3 == 0 else 0,
                    status="truncated" if i == 3 and g == 1 else "completed",
                    weight_versions=["3"],
                )
            )
    write_rollout(dump, 2, samples)
    return dump


def live_app(tmp_path: Path):
    dump = dump_with_rollouts(tmp_path)
    monitor = RunMonitor()
    monitor.attach_dump(dump)
    app = make_app(tmp_path / "state")
    app.session = types.SimpleNamespace(monitor=monitor, rollouts=None)
    return app, dump


def _head(app) -> str:
    return str(app.screen.query_one("#samples-head", Static).content)


def _cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(r)] for r in range(table.row_count)]


async def open_samples(app, pilot, rollout: str = "rollout 2") -> SamplesScreen:
    await pilot.press("2")
    await until(pilot, lambda: app.current_view == "run" and app.view("run").is_mounted, "the run view")
    await pilot.press("G")
    await until(pilot, lambda: isinstance(app.screen, SamplesScreen), "the samples screen")
    await until(pilot, lambda: rollout in _head(app), f"{rollout} drawn")
    return app.screen


async def test_groups_filters_a_group_and_rollouts(tmp_path):
    app, _dump = live_app(tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_samples(app, pilot)
        groups = screen.query_one("#samples-groups", DataTable)
        rows = _cells(groups)
        assert [r[0] for r in rows] == ["20", "21", "22", "23"]
        assert rows[0][2] == "1001" and rows[1][6] == "1"  # rewards as digits; group 21 has 1 truncated
        await pilot.press("[")  # rollout 1: integer rewards, the gap, the short group
        await until(pilot, lambda: "rollout 1:" in _head(app), "rollout 1")
        assert "zero-std 3/4 (all-0 1, all-1 2)" in _head(app) and app.rollout_cursor == 1
        await pilot.press("z")
        await until(pilot, lambda: groups.row_count == 3, "zero-std only")
        assert [r[0] for r in _cells(groups)] == ["8", "9", "12"] and "zero-std only" in _head(app)
        await pilot.press("z", "[")
        await until(pilot, lambda: "rollout 0:" in _head(app), "rollout 0")
        await until(pilot, lambda: groups.row_count == 2, "rollout 0's groups")
        await pilot.press("t")
        await until(pilot, lambda: [r[0] for r in _cells(groups)] == ["1"], "truncated only: group 1")
        await pilot.press("enter")
        members = screen.query_one("#samples-members", DataTable)
        await until(pilot, lambda: members.display and members.row_count == 4, "group 1's samples")
        assert [r[1] for r in _cells(members)] == ["completed", "completed", "truncated", "completed"]
        assert [r[3] for r in _cells(members)] == ["+0.87", "-0.87", "-0.87", "+0.87"]
        detail = screen.query_one("#samples-sample", Static)
        assert "──── </think> ────" in str(detail.content) and "advantage +0.866" in str(detail.content)
        await pilot.press("down", "down")
        await until(pilot, lambda: "sample #6" in str(detail.content), "the truncated sample")
        assert "no </think>" in str(detail.content)
        await pilot.press("escape")
        await until(pilot, lambda: not members.display and groups.display, "back to the groups")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SamplesScreen), "closed")


async def test_rollout_steps_move_the_charts_marker(tmp_path):
    """`[` in the samples screen is the charts' cursor too, once the log has reached that rollout."""
    app, _dump = live_app(tmp_path)
    index = RolloutIndex()
    index.on_lines(0, 2, "perf 0: {'perf/rollout_time': 1.0}\nperf 1: {'perf/rollout_time': 1.0}\n")
    app.session.rollouts = index
    async with app.run_test(size=(120, 40)) as pilot:
        await open_samples(app, pilot)
        chart = app.view("run").query_one("#chart-throughput", LineChart)
        await pilot.press("[")
        await until(pilot, lambda: chart.marker == 1, "the charts mark rollout 1")
        assert app.rollout_cursor == 1


async def test_narrow_plot_replaces_the_table(tmp_path):
    app, _dump = live_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_samples(app, pilot)
        groups, plot = screen.query_one("#samples-groups"), screen.query_one("#samples-plot", Static)
        assert groups.display and not plot.display
        await pilot.press("p")
        await until(pilot, lambda: plot.display and not groups.display, "the plot instead of the table")
        assert "reward vs response length" in str(plot.content)
        await pilot.press("p")
        await until(pilot, lambda: groups.display and not plot.display, "the table back")


async def test_hostile_text_is_shown_as_text(tmp_path):
    app, _dump = live_app(tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_samples(app, pilot)
        await pilot.press("enter")
        detail = screen.query_one("#samples-sample", Static)
        await until(pilot, lambda: "sample #80" in str(detail.content), "a sample")
        shown = str(detail.content)
        assert "\x1b" not in shown and "\x9b" not in shown and "\x07" not in shown
        assert "[bold red]not markup[/]" in shown  # markup shown as the text it is


async def test_a_new_rollout_file_is_followed(tmp_path):
    app, dump = live_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_samples(app, pilot)
        write_rollout(dump, 3, [sample_record(30, 120 + i, reward=i % 2, response=f"r{i}") for i in range(4)])
        await until(pilot, lambda: "rollout 3:" in _head(app), "rollout 3 followed", timeout=20)


async def test_replay_over_a_dump_dir_has_the_samples(tmp_path):
    dump = dump_with_rollouts(tmp_path)
    session = ReplaySession(detect_source(dump), tmp_path / "spool")
    app = UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    async with app.run_test(size=(120, 40)) as pilot:
        monitor = session.monitor
        assert monitor is not None
        await until(pilot, lambda: monitor.samples is not None, "the replay read the dump")
        await open_samples(app, pilot)
        assert "4 of 4 groups shown" in _head(app)


def test_scatter_marks_truncated() -> None:
    rollout_dir = DATA / "miles_4x4"
    from backend.signals.rollout_data import read_rollout

    rollout = read_rollout(rollout_dir / "rollout_data" / "0.pt", now=1e12)
    text = scatter(rollout.samples, 20, 3).plain.splitlines()[1:]
    assert text[2].rstrip().endswith("x")  # the truncated 96-token sample: reward 0, longest
    assert text[0].startswith(" 1.00") and "96 tokens" in text[-1]


@pytest.mark.parametrize("size", SIZES)
def test_samples_snapshot(snap_compare, tmp_path, size):
    app, _dump = live_app(tmp_path)

    async def run_before(pilot) -> None:
        await open_samples(app, pilot)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_group_samples_snapshot(snap_compare, tmp_path, size):
    app, _dump = live_app(tmp_path)

    async def run_before(pilot) -> None:
        screen = await open_samples(app, pilot)
        await pilot.press("down", "enter")
        detail = screen.query_one("#samples-sample", Static)
        await until(pilot, lambda: "sample #84" in str(detail.content), "group 21's first sample")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
