"""The logs view's compact prefix: Ray's `(MegatronTrainRayActor pid=52002, ip=10.0.0.2)` drawn as `train r8`,
on by default under 160 columns, toggled by its key; search, filter and copy keep working on the real line."""

from __future__ import annotations

import pytest
from app_helpers import make_app, type_text
from run_fixtures import store
from textual.widgets import Input
from waiting import until

from backend.settings import Settings
from backend.signals.replay import ReplaySession, detect_source
from console import keymap
from console.app import UltraConsoleApp
from console.views.logs import LogsView
from console.widgets.help_screen import keys_table

RAY_PREFIX = "(MegatronTrainRayActor pid=52002, ip=10.0.0.2)"


async def _shown(app: UltraConsoleApp, pilot, tmp_path) -> LogsView:
    await pilot.press("3")
    view = app.query_one(LogsView)
    view.set_store(store(tmp_path, 300))
    await pilot.pause()
    return view


RANK8 = sum(1 for i in range(300) if i % 3 == 2 and i % 50)  # the fixture's lines of rank 8 (on 10.0.0.2)


def _rows(view: LogsView) -> list[str]:
    return [view.lines.render_line(y).text for y in range(view.lines.size.height)]


def _rank8_rows(view: LogsView) -> list[str]:
    """The drawn rows of rank 8's lines (the record says which: the row itself may be cut at the width)."""
    top, lines = int(view.lines.scroll_y), view.lines
    return [
        row for y, row in enumerate(_rows(view)) if top + y < lines.count and lines.record(top + y).rank == 8
    ]


@pytest.mark.parametrize(("width", "compact"), [(120, True), (80, True), (200, False)])
async def test_compact_by_default_under_160_columns_and_the_key_toggles_it(tmp_path, width, compact):
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(width, 40)) as pilot:
        view = await _shown(app, pilot, tmp_path)
        assert view.lines.compact_now is compact
        for expect_compact in (compact, not compact, compact):
            rows = _rank8_rows(view)
            assert rows
            if expect_compact:
                assert all(r.startswith("train r8   [2026-01-01") for r in rows), rows[0]
                assert not any(RAY_PREFIX in r for r in _rows(view))
            else:
                assert all(r.startswith(RAY_PREFIX[: width - 1]) for r in rows), rows[0]
            await pilot.press("p")
            await pilot.pause()


async def test_search_filter_and_copy_read_the_real_line(tmp_path):
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _shown(app, pilot, tmp_path)
        lines = view.lines
        assert lines.compact_now
        prompt = view.query_one("#logs-prompt", Input)
        await pilot.press("slash")
        text = "pid=52002, ip=10.0.0.2"  # text only Ray's prefix holds
        await type_text(pilot, text, lambda: prompt.value == text, "the search typed")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert len(view.matches) == RANK8
        assert lines.record(lines.cursor).text.startswith(RAY_PREFIX)
        await pilot.press("y")
        assert app.clipboard == lines.record(lines.cursor).text  # the whole line, prefix as Ray wrote it
        await pilot.press("f")
        text = "actor:MegatronTrainRayActor node:10.0.0.2"
        await type_text(pilot, text, lambda: prompt.value == text, "the filter typed")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert lines.count == RANK8 and all(r.startswith("train r8 ") for r in _rows(view) if r.strip())


def test_the_key_has_an_id_is_remappable_and_is_in_help():
    (spec,) = [s for s in keymap.specs("logs") if s.action == "toggle_compact"]
    assert spec.id == "logs.compact" and spec.key == "p"
    good, problems = keymap.validate_keymap({"logs.compact": "ctrl+k"})
    assert good == {"logs.compact": "ctrl+k"} and not problems
    table = keys_table({"logs.compact": "ctrl+k"}, readonly=False)
    assert "logs.compact" in table.columns[3]._cells and "ctrl+k" in table.columns[1]._cells


async def test_a_remapped_key_toggles_it(tmp_path):
    app = make_app(tmp_path / "state", keys={"logs.compact": "ctrl+k"})
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _shown(app, pilot, tmp_path)
        assert view.lines.compact_now
        await pilot.press("ctrl+k")
        assert not view.lines.compact_now


async def test_a_line_without_a_rank_takes_its_process_rank_from_the_rest_of_the_log(tmp_path):
    """A print of rank 3's process (no miles bracket) is drawn `train r3`: the session's monitor learned which
    process is rank 3 from its bracketed lines (a replay: the same monitor a live run has)."""
    path = tmp_path / "job-driver.log"
    prefix = "(MegatronTrainRayActorWithConcurrencyGroups pid=4101, ip=10.0.0.3)"
    path.write_text(
        f"{prefix} [2026-10-02 10:00:05.120 actor_cell0_rank3] log_utils.py:544 - step 1: {{'train/loss': "
        f"0.5}}\n{prefix} a plain print, no bracket\n"
        "(RolloutManager pid=51234, ip=10.0.0.1) [2026-10-02 10:00:06.000 rollout_manager] rollout.py:1 - "
        "hi\n(MegatronTrainRayActorWithConcurrencyGroups pid=4102, "
        "ip=fd00:1234:5678:9abc:def0:1234:5678:9abc) up\n"
    )
    session = ReplaySession(detect_source(path), tmp_path / "spool")
    app = UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(LogsView)
        await until(pilot, lambda: view.lines.count == 4 and not view.history, "the log read")
        await until(
            pilot, lambda: _rows(view)[1].startswith("train r3   a plain print"), "the print drawn as rank 3"
        )
        assert _rows(view)[2].startswith("rollout p51234 [2026-10-02")
        assert _rows(view)[3].startswith("train p4102 up")  # a 97-character prefix (IPv6) too
        assert view.lines.record(1).text.startswith(prefix)  # the line itself is untouched
