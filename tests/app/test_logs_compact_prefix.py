"""The logs view's compact prefix: Ray's `(MegatronTrainRayActor pid=52002, ip=10.0.0.2)` drawn as `train r8`,
on by default under 160 columns, toggled by its key; search, filter and copy keep working on the real line."""

from __future__ import annotations

import pytest
from app_helpers import make_app
from run_fixtures import store

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
        await pilot.press("slash", *"pid=52002, ip=10.0.0.2", "enter")  # text only Ray's prefix holds
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert len(view.matches) == RANK8
        assert lines.record(lines.cursor).text.startswith(RAY_PREFIX)
        await pilot.press("y")
        assert app.clipboard == lines.record(lines.cursor).text  # the whole line, prefix as Ray wrote it
        await pilot.press("f", *"actor:MegatronTrainRayActor node:10.0.0.2", "enter")
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
