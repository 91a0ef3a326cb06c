"""Pilot tests of the logs view over the real LogStore: follow, pause, resume, search n/N, filter,
wrap, jump to time, copy; the view never holds the lines (it reads the store lazily)."""

from __future__ import annotations

import threading

from app_helpers import make_app, type_text
from run_fixtures import log_text, store
from textual.widgets import Input, ProgressBar, Static
from waiting import until

from backend.signals import search
from console.messages import LogAppended
from console.views import logs
from console.views.logs import LogLines, LogsView


async def _logs_app(tmp_path, n: int = 300, size=(120, 40)):
    app = make_app(tmp_path / "state")
    st = store(tmp_path, n)
    return app, st


async def _show(app, pilot, st) -> LogsView:
    """Switch to the logs view and give it the store (what the log worker does on attach)."""
    await pilot.press("3")
    view = app.query_one(LogsView)
    view.set_store(st)
    await pilot.pause()
    return view


async def _typed(pilot, view: LogsView, key: str, text: str) -> None:
    """`key` opens the Logs prompt, `text` goes in as one burst of keys (app_helpers.type_text: typing is not
    the subject here), then Enter."""
    prompt = view.query_one("#logs-prompt", Input)
    await pilot.press(key)
    await type_text(pilot, text, lambda: prompt.value.endswith(text), f"{text!r} typed")
    await pilot.press("enter")


def _status(view: LogsView) -> str:
    return str(view.query_one("#logs-status", Static).content)


async def test_follow_pause_resume(tmp_path):
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        lines = view.lines
        assert lines.follow and lines.cursor == 299
        assert "iteration 299" in lines.render_line(lines.size.height - 1).text  # bottom line = newest
        st.append("".join(f"(RolloutManager pid=51234, ip=10.0.0.1) new line {i}\n" for i in range(50)))
        app.post_message(LogAppended(len(st)))
        await pilot.pause()
        assert lines.cursor == 349 and lines.follow
        await pilot.press("k", "pageup")  # moving up pauses follow
        assert not lines.follow
        paused_at = lines.cursor
        st.append("more 1\nmore 2\n")
        app.post_message(LogAppended(len(st)))
        await pilot.pause()
        assert lines.cursor == paused_at and lines.pending == 2
        assert "PAUSED +2 new" in _status(view)
        await pilot.press("G")
        assert lines.follow and lines.cursor == 351 and lines.pending == 0
        await pilot.press("home")
        assert lines.cursor == 0 and not lines.follow
        await pilot.press("end")
        assert lines.follow and lines.cursor == 351


async def test_search_next_prev_and_cancel(tmp_path):
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        await pilot.press("home")
        await _typed(pilot, view, "slash", "grad_norm 1.2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        # lines 2, 5, 8 ... carry grad_norm; "grad_norm 1.2" matches iterations 200..299 with i % 3 == 2
        expected = [i for i in range(300) if i % 3 == 2 and i % 50 and 200 <= i <= 299]
        assert list(view.matches) == expected
        assert view.lines.cursor == expected[0]
        await pilot.press("n")
        assert view.lines.cursor == expected[1]
        await pilot.press("N", "N")
        assert view.lines.cursor == expected[-1]  # wraps round
        assert f"{len(expected)}/{len(expected)}" in _status(view)
        await _typed(pilot, view, "slash", "re:NCCL WARN")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert list(view.matches) == [77]
        await _typed(pilot, view, "slash", "nothing-like-this")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert list(view.matches) == [] and "no match" in _status(view)
        await pilot.press("slash", "x", "escape")  # Esc closes the prompt and cancels
        assert not view.query_one("#logs-prompt").has_class("visible")


async def test_the_status_row_keeps_the_search_while_history_loads(tmp_path):
    """At 120 columns a paused view loading a long history still draws where the search is (`/text i/N`):
    the history part goes last, so it is the one the row's edge cuts (the e2e tmux test's search step waited
    90 s for `/step 2: 1/N` once, its row full of history, line numbers and PAUSED)."""
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        view.history = "loading history of ultra-console-261202-220000-000… 123,456 lines"
        view.start_search("grad_norm 1.2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        row = view.query_one("#logs-status", Static).render_line(0).text
        assert not view.lines.follow and "PAUSED" in row
        assert "/grad_norm 1.2 1/" in row, row


async def test_filter_by_node_and_rank_then_clear(tmp_path):
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        await _typed(pilot, view, "f", "node:10.0.0.2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        lines = view.lines
        kept = [lines.record(i) for i in range(lines.count)]
        assert kept and all(r.ip == "10.0.0.2" for r in kept)
        assert lines.count == sum(1 for i in range(300) if i % 3 == 2 and i % 50)
        st.append(
            "(MegatronTrainRayActor pid=52002, ip=10.0.0.2) [2026-01-01 12:10:00.000 actor_cell0_rank8] "
            "x.py:1 - late\n(RolloutManager pid=51234, ip=10.0.0.1) other node\n"
        )
        app.post_message(LogAppended(len(st)))
        await pilot.pause()
        assert lines.record(lines.count - 1).message == "late"  # the filter follows new lines too
        await _typed(pilot, view, "f", "rank:0")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert all(lines.record(i).rank == 0 for i in range(lines.count))
        await pilot.press("f", "ctrl+u", "enter")  # empty filter: every line again
        await pilot.pause()
        assert lines.index is None and lines.count == len(st)


async def test_wrap_jump_to_time_and_copy(tmp_path):
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        view = await _show(app, pilot, st)
        lines = view.lines
        width = lines.scrollable_content_region.width  # the scrollbar's cells are not the row's
        await _typed(pilot, view, "t", "12:02:05")
        await pilot.pause()
        assert lines.record(lines.cursor).ts == "2026-01-01 12:02:05.000"
        await pilot.press("y")
        assert app.clipboard == lines.record(lines.cursor).text
        lines.compact = False  # Ray's prefix as written (80 columns would draw it as role and rank)
        await pilot.press("w")
        await pilot.pause()
        assert lines.wrap
        rows = [lines.render_line(y).text for y in range(lines.size.height)]
        assert all(len(r.rstrip()) <= width for r in rows)
        first = lines.record(int(lines.scroll_y)).text
        assert (
            rows[0].rstrip() == first[:width].rstrip() and rows[1].strip() == first[width : 2 * width].strip()
        )


async def test_view_reads_only_visible_lines(tmp_path):
    """A big log costs the view nothing per line: only the rows on screen are read and rendered."""
    app = make_app(tmp_path / "state")
    st = store(tmp_path, 10)
    st.append(log_text(300) * 200)  # 60k lines
    async with app.run_test(size=(100, 30)) as pilot:
        await _show(app, pilot, st)
        lines = app.query_one(LogLines)
        assert lines.count == 60_010
        assert len(lines._cache) <= lines.size.height + 2


async def test_search_shows_its_first_hit_and_progress_while_it_runs_and_esc_stops_it(tmp_path, monkeypatch):
    """A search over a week-long log takes a while: its first hit is on screen, with a progress bar, before
    the scan ends, and Esc stops the scan (the backend's scan is held at its second block until the test
    has looked, so "before it ends" is certain, not a race)."""
    app, st = await _logs_app(tmp_path)
    release, stopped = threading.Event(), threading.Event()

    def held(store, pattern, *, cancel, **kwargs):
        batches = search.search_batches(store, pattern, cancel=cancel, block_bytes=1 << 10, **kwargs)
        yield next(batches)  # the first block: hits
        release.wait(30)
        yield from batches
        stopped.set()

    monkeypatch.setattr(logs, "search_batches", held)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        await _typed(pilot, view, "slash", "iteration")
        await until(pilot, lambda: view.matches, "the first block's hits")
        bar = view.query_one("#logs-search-progress", ProgressBar)
        assert view.searching and bar.has_class("visible") and "searching /iteration" in _status(view)
        assert view.lines.cursor == view.matches[0]  # following: the first hit, at once
        assert bar.total == len(st) and 0 < bar.progress < len(st)
        await pilot.press("escape")
        assert not view.searching and not bar.has_class("visible")
        release.set()
        await until(pilot, stopped.is_set, "the scan to stop")
        assert len(view.matches) < 300 and app.current_view == "logs"  # Esc stopped it, did not go back


async def test_clearing_a_filter_while_it_scans_drops_the_scan(tmp_path, monkeypatch):
    """A filter's first scan of a long log runs in a thread; clearing the filter meanwhile stops it, and the
    scan's end does not bring the filter back (the scan is held until the test has cleared it)."""
    release, started = threading.Event(), threading.Event()

    class Held(logs.FilteredLines):
        def refresh(self, cancel=None, block=1 << 20):
            started.set()
            release.wait(30)
            return super().refresh(cancel, block)

    monkeypatch.setattr(logs, "FilteredLines", Held)
    app, st = await _logs_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        await _typed(pilot, view, "f", "node:10.0.0.2")
        await until(pilot, started.is_set, "the filter's scan to start")
        assert view.filtering
        await pilot.press("f", "ctrl+u", "enter")  # empty filter: every line again
        assert not view.filtering and view.lines.index is None
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert view.lines.index is None and view.lines.count == len(st) and "filter" not in _status(view)


async def test_a_tab_in_a_log_line_is_drawn_as_spaces_and_copied_as_a_tab(tmp_path):
    """Ray's ActorDiedError indents its fields with tabs; a tab sent to the terminal skips cells unwritten,
    which left the Run view's chart axes on screen beside the log (seen in the demo)."""
    app, st = await _logs_app(tmp_path, n=10)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _show(app, pilot, st)
        lines = view.lines
        st.append("ray.exceptions.ActorDiedError: The actor died\n\tclass_name: MegatronTrainRayActor\n")
        app.post_message(LogAppended(len(st)))
        await pilot.pause()
        assert lines.cursor == len(st) - 1 and lines.follow
        bottom = lines.render_line(lines.cursor - int(lines.scroll_y))
        assert all("\t" not in seg.text for seg in bottom)
        assert bottom.text.startswith(" " * 8 + "class_name: MegatronTrainRayActor")
        assert bottom.cell_length == lines.size.width  # every cell of the row is written
        await pilot.press("y")
        assert app.clipboard == "\tclass_name: MegatronTrainRayActor"  # the line as the run wrote it


def _screen_rows(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def test_wrap_keeps_every_character_on_screen(tmp_path):
    """Each wrapped row is cut where the vertical scrollbar begins: a row cut at the widget's full width lost
    the two cells under the scrollbar at every wrap point (`tr n.py`, `--n -layers`)."""
    app = make_app(tmp_path / "state")
    st = store(tmp_path, 2)
    long = " ".join(f"--num-layers-{i} train.py" for i in range(30))
    st.append(long + "\n" + "".join(f"short {i}\n" for i in range(40)))
    async with app.run_test(size=(80, 24)) as pilot:
        view = await _show(app, pilot, st)
        lines = view.lines
        await pilot.press("w")
        await pilot.pause()
        lines.move_to(2)
        lines.scroll_to(y=2, animate=False, immediate=True, force=True)
        await pilot.pause()
        assert lines.vertical_scrollbar.display  # the case that lost characters: a scrollbar beside the rows
        region = lines.scrollable_content_region
        shown = [row[region.x : region.right] for row in _screen_rows(app)[region.y : region.bottom]]
        joined = "".join(r.rstrip() if i == len(shown) - 1 else r for i, r in enumerate(shown) if r.strip())
        assert long in joined, joined
