"""The logs view: the run's whole history as a virtual line-API view over backend's LogStore.

Like toolong, nothing here holds the lines: `LogLines` asks the store for the few lines on screen
(plus a small LRU of rendered Strips), so a 10M-line run costs the view a few integers. The store
(backend.signals.store) sanitises, parses fields, spools to disk and searches; this module only draws,
moves a cursor and routes keys.

Follow mode sticks to the end while lines arrive; moving up pauses it (the status bar counts the
lines that arrived since) and End/G resumes it. `/` searches in a thread worker on this view (the widget
that owns the hits): hits arrive block by block, the first one is on screen at once, a progress bar shows how
far the scan has read, and Esc or a new search cancels it; n/N step through the hits. `f` filters by
actor/rank/node (`actor:Rollout rank:3 node:10.0.0.7`), `w` wraps, `t` jumps to a time, `y`/`c`
copies the current line through OSC 52. `p` draws Ray's actor prefix as role and rank (`train r3`), the
default under 160 columns; only the drawing changes, never the line searched, filtered or copied.

Backend calls used: `len(store)`, `store.line(i)` (a LogLine), backend.signals.search's
`search_batches(store, ..., cancel=CancelToken)` and backend.signals.filters' `FilteredLines(store,
LineFilter)` (refreshed incrementally), filter language and time index (`parse_filter`, `line_at_time`).
"""

from __future__ import annotations

import re
import time
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from rich.segment import Segment
from rich.style import Style
from textual import events, on, work
from textual.app import ComposeResult
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, ProgressBar, Static
from textual.worker import get_current_worker

from backend.signals.filters import (
    FILTER_HELP,
    FilteredLines,
    FilterSyntaxError,
    LineFilter,
    TimeSyntaxError,
    line_at_time,
    parse_filter,
)
from backend.signals.log_prefix import WIDTH as PREFIX_WIDTH
from backend.signals.log_prefix import compact_prefix
from backend.signals.search import search_batches
from backend.signals.store import CancelToken, LogLine, LogStore
from console import keymap
from console.messages import HistoryProgress, LogAppended, LogStoreOpened, RolloutCursor, ShowLogLine
from console.views.base import ConsoleView
from console.widgets.prompt import Prompt

if TYPE_CHECKING:
    from console.host import ConsoleHost

CACHE_LINES = 2000
PREFIX_MAX = 160  # Ray's prefix is ~90 characters with a long class name and an IPv6 address; never more
COMPACT_BELOW_COLUMNS = 160  # narrower terminals show Ray's prefix as role and rank unless the operator says
SEARCH_POST_S = 0.1  # a running search shows new hits and progress this often (the first hit at once)
_CURSOR = Style(bgcolor="#33415c")
_MATCH = Style(color="#000000", bgcolor="#e5c07b")
_ACTOR = Style(color="#7f8fa6")


def search_options(text: str) -> tuple[str, bool]:
    """`re:PATTERN` searches a regex; anything else is a case-insensitive substring."""
    if text.startswith("re:"):
        return text[3:], True
    return text, False


TAB_SIZE = 8  # a terminal's tab stops


class LogLines(ScrollView, can_focus=True, inherit_bindings=False):
    """Virtual view of `store` (optionally through `index`, the lines a filter kept)."""

    DEFAULT_CSS = """
    LogLines { height: 1fr; overflow-x: auto; overflow-y: auto; }
    """

    class CursorMoved(Message):
        pass

    follow: reactive[bool] = reactive(True)
    wrap: reactive[bool] = reactive(False)

    def __init__(self, store: LogStore | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.index: FilteredLines | None = None  # None: every line; else the lines a filter kept
        self.cursor = 0  # position in the (filtered) view
        self.pending = 0  # lines that arrived while follow was paused
        self.pattern: re.Pattern[str] | None = None
        self._cache: OrderedDict[tuple[int, int, bool, int], Strip] = OrderedDict()
        self.compact: bool | None = None  # Ray's prefix as role and rank; None: by the terminal's width
        self._wrap_rows: list[tuple[int, Strip]] = []
        self._max_width = 0
        self._centered: int | None = None  # the line a jump centred: kept centred when the height changes

    # ------------------------------------------------------------ size and mapping
    @property
    def count(self) -> int:
        if self.index is not None:
            return len(self.index)
        return len(self.store) if self.store is not None else 0

    def store_index(self, pos: int) -> int:
        return self.index[pos] if self.index is not None else pos

    def record(self, pos: int) -> LogLine:
        assert self.store is not None  # positions exist only while a store is shown
        return self.store.line(self.store_index(pos))

    def sync(self) -> None:
        """The store (or filter) changed size: update the scroll range; stick to the end if following."""
        old = self.virtual_size.height
        count = self.count
        width = max(self._max_width, self.size.width)
        self.virtual_size = Size(0 if self.wrap else width, count)
        if self.follow:
            self.cursor = max(0, count - 1)
            self.scroll_to(y=max(0, count - self.size.height), animate=False, immediate=True, force=True)
        elif count > old:
            self.pending += count - old
        self.refresh()

    def on_mouse_scroll_up(self) -> None:
        """Only the operator pauses follow (keys or the wheel), never a resize or a clamp."""
        if self.follow:
            self.follow = False
            self.post_message(self.CursorMoved())

    def on_resize(self) -> None:
        self._cache.clear()
        self.sync()
        if self._centered is not None and self._centered == self.cursor and not self.follow:
            self.move_to(self._centered, center=True)  # the search prompt closing gives the view a row

    def watch_wrap(self) -> None:
        self._cache.clear()
        self.sync()

    # ------------------------------------------------------------ moving
    def move_to(self, pos: int, *, center: bool = False) -> None:
        count = self.count
        if not count:
            return
        pos = max(0, min(count - 1, pos))
        if pos < count - 1 and self.follow:
            self.follow = False
        self.cursor = pos
        height = max(1, self.size.height)
        top = int(self.scroll_y)
        self._centered = pos if center else None
        if center:
            top = pos - height // 2
        elif pos < top:
            top = pos
        elif pos >= top + height:
            top = pos - height + 1
        self.scroll_to(y=max(0, top), animate=False, immediate=True, force=True)
        self.refresh()
        self.post_message(self.CursorMoved())

    def resume_follow(self) -> None:
        self.follow = True
        self.pending = 0
        self.sync()
        self.post_message(self.CursorMoved())

    # ------------------------------------------------------------ drawing
    @property
    def compact_now(self) -> bool:
        """Ray's prefix drawn as role and rank: as the operator
        chose, else on a terminal under 160 columns."""
        return self.compact if self.compact is not None else self.app.size.width < COMPACT_BELOW_COLUMNS

    def _process_ranks(self) -> Mapping[tuple[str, int], int]:
        """Which process is which rank, as the session's monitor
        learned it from the whole log (only read here)."""
        session = cast("ConsoleHost", self.app).session
        monitor = session.monitor if session is not None else None
        return monitor.process_ranks if monitor is not None else {}

    def _render_record(self, pos: int, width: int) -> list[Segment]:
        rec = self.record(pos)
        # A tab reaching the terminal moves its cursor over cells it never writes, so what was drawn there
        # before (another view's chart) stays on screen: tabs are drawn as the spaces a terminal would skip.
        # Display only, like the compact prefix: search, filters and copy read the record's own text.
        text = rec.text.expandtabs(TAB_SIZE) if "\t" in rec.text else rec.text
        segs: list[Segment] = []
        if (rec.actor or rec.pid is not None) and text.startswith("(") and ")" in text[:PREFIX_MAX]:
            end = text.index(")") + 1
            shown = text[:end]
            if self.compact_now:  # display only: search, filters and copy read the record's own text
                shown = compact_prefix(rec, self._process_ranks()).ljust(PREFIX_WIDTH)
            segs.append(Segment(shown, _ACTOR))
            text = text[end:]
        if self.pattern is not None:
            last = 0
            for m in self.pattern.finditer(text):
                if m.end() == m.start():
                    break
                segs.append(Segment(text[last : m.start()]))
                segs.append(Segment(m.group(), _MATCH))
                last = m.end()
            segs.append(Segment(text[last:]))
        else:
            segs.append(Segment(text))
        return segs

    def _strip(self, pos: int, width: int) -> Strip:
        compact = len(self._process_ranks()) if self.compact_now else -1  # a rank learned redraws the line
        key = (pos if self.index is None else -1 - self.store_index(pos), width, pos == self.cursor, compact)
        strip = self._cache.get(key)
        if strip is None:
            segs = self._render_record(pos, width)
            strip = Strip(segs)
            self._max_width = max(self._max_width, strip.cell_length)
            if pos == self.cursor:
                strip = strip.extend_cell_length(width).apply_style(_CURSOR)
            self._cache[key] = strip
            if len(self._cache) > CACHE_LINES:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return strip

    def invalidate(self) -> None:
        self._cache.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        style = self.rich_style
        if self.store is None or not self.count:
            text = "no log yet" if y == 0 else ""
            return Strip([Segment(text, Style(dim=True))]).extend_cell_length(width, style)
        if self.wrap:
            if y == 0 or not self._wrap_rows:
                # rows are cut at the width the scrollbar leaves: cut at `width`, the two cells under the
                # vertical scrollbar were lost at every wrap point
                self._layout_wrapped(self.scrollable_content_region.width or width)
            if y < len(self._wrap_rows):
                return self._wrap_rows[y][1].extend_cell_length(width, style)
            return Strip.blank(width, style)
        pos = int(self.scroll_y) + y
        if pos >= self.count:
            return Strip.blank(width, style)
        strip = self._strip(pos, width)
        scroll_x = int(self.scroll_x)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _layout_wrapped(self, width: int) -> None:
        rows: list[tuple[int, Strip]] = []
        pos = int(self.scroll_y)
        height = self.size.height
        while len(rows) < height and pos < self.count:
            strip = self._strip(pos, width)
            if strip.cell_length <= width:
                rows.append((pos, strip))
            else:
                for cut in range(0, strip.cell_length, max(1, width)):
                    rows.append((pos, strip.crop(cut, cut + width)))
            pos += 1
        self._wrap_rows = rows[:height]


def _stopped(cancel: CancelToken) -> bool:
    """A search worker's stop: its token cancelled (a newer search, Esc) or the worker itself."""
    return cancel.cancelled or get_current_worker().is_cancelled


class LogsView(ConsoleView, can_focus=False):
    """Logs view: LogLines, a status bar, and one prompt for search / filter / jump."""

    SCOPE = "logs"
    DEFAULT_CSS = """
    LogsView { height: 1fr; layout: vertical; }
    LogsView #logs-status { height: 1; background: $boost; color: $text-muted; }
    LogsView #logs-prompt { display: none; dock: bottom; }
    LogsView #logs-prompt.visible { display: block; }
    LogsView #logs-search-progress { display: none; height: 1; }
    LogsView #logs-search-progress.visible { display: block; }
    """
    BINDINGS = keymap.bindings_for("logs")

    def __init__(self, store: LogStore | None = None, *, id: str | None = "logs-view") -> None:
        super().__init__(id=id)
        self.history: str = ""  # "loading history… N lines" while a job's log is being rebuilt
        self._store = store
        self.matches = array("I")  # store indices of search hits, ascending (4 bytes a hit)
        self.match_at = -1
        self.search_text = ""
        self.filter_text = ""
        self.searching = False
        self.filtering = False
        self._prompt_mode = ""
        self._search_cancel: CancelToken | None = None
        self._filter_cancel: CancelToken | None = None

    def compose(self) -> ComposeResult:
        yield LogLines(self._store, id="log-lines")
        yield Static("", id="logs-status")
        yield ProgressBar(show_eta=False, id="logs-search-progress")
        yield Prompt(id="logs-prompt")

    @property
    def lines(self) -> LogLines:
        return self.query_one(LogLines)

    def on_mount(self) -> None:
        self.lines.sync()
        self._status()

    def set_store(self, store: LogStore) -> None:
        self._store = store
        self.lines.store = store
        self.lines.index = None
        self.lines.invalidate()
        self.lines.sync()
        self._status()

    # ------------------------------------------------------------ messages
    def on_log_store_opened(self, message: LogStoreOpened) -> None:
        """A new job was attached: its fresh store is what this view shows from now on."""
        self.set_store(message.store)

    def on_log_appended(self, message: LogAppended) -> None:
        self.refresh_from_store()

    def view_shown(self) -> None:
        self.lines.sync()
        self._status()

    def on_history_progress(self, message: HistoryProgress) -> None:
        self.history = "" if message.done else f"loading history of {message.job_id}… {message.lines:,} lines"
        self._status()

    def on_rollout_cursor(self, message: RolloutCursor) -> None:
        """Jump to the first line of the rollout the cursor moved to (its first kept line under a filter)."""
        self._go_to_line(message.mark.first_line)

    def on_show_log_line(self, message: ShowLogLine) -> None:
        """Jump to one line (the cause's, from the diagnosis panel); under a filter, the next kept line."""
        self._go_to_line(message.line)

    def _go_to_line(self, target: int) -> None:
        ll = self.lines
        if not ll.count:
            return
        pos = target if ll.index is None else bisect_left(ll.index.indices, target)
        pos = max(0, min(pos, ll.count - 1))
        ll.move_to(pos)
        ll.scroll_to(y=pos, animate=False, immediate=True, force=True)
        self._status()

    def refresh_from_store(self) -> None:
        """New lines in the store: cheap (no line is read unless it is on screen; a filter scans
        only the new lines, in C, through the store's FilteredLines)."""
        ll = self.lines
        if ll.index is not None and not self.filtering:
            ll.index.refresh()
        ll.sync()
        self._status()

    @on(LogLines.CursorMoved)
    def _cursor_moved(self) -> None:
        self._status()

    def _status(self) -> None:
        """One row: where the cursor is, the filter, follow, the search, then the history being loaded (the
        longest part, and the one the row's edge may cut: a search's `i/N` must stay on screen)."""
        ll = self.lines
        parts = [
            f"line {ll.cursor + 1 if ll.count else 0}/{ll.count}",
            self._filter_part(),
            "FOLLOW" if ll.follow else f"PAUSED +{ll.pending} new (End/G follows)",
            self._search_part(),
            "wrap" if ll.wrap else "",
            self.history,
        ]
        self.query_one("#logs-status", Static).update(" │ ".join(p for p in parts if p), layout=False)

    def _filter_part(self) -> str:
        """The status line's filter: being applied, or applied (how many lines of the store it keeps)."""
        if self.filtering:
            return f"filtering {self.filter_text!r}…"
        if self.lines.index is not None:
            return f"filter {self.filter_text!r} ({self.lines.count} of {len(self._store or ())})"
        return ""

    def _search_part(self) -> str:
        """The status line's search: running (hits so far), or done (which hit the cursor is on)."""
        if self.searching:
            return f"searching /{self.search_text}… {len(self.matches):,} hits (Esc stops)"
        if not self.search_text:
            return ""
        at = f"{self.match_at + 1:,}/{len(self.matches):,}" if self.matches else "no match"
        return f"/{self.search_text} {at}"

    # ------------------------------------------------------------ prompt
    def _open_prompt(self, mode: str, placeholder: str, value: str = "") -> None:
        prompt = self.query_one("#logs-prompt", Input)
        self._prompt_mode = mode
        prompt.placeholder = placeholder
        prompt.value = value
        prompt.add_class("visible")
        prompt.focus()

    def _close_prompt(self) -> None:
        prompt = self.query_one("#logs-prompt", Input)
        prompt.remove_class("visible")
        self._prompt_mode = ""
        self.lines.focus()

    def on_key(self, event: events.Key) -> None:
        """Esc closes the prompt, and cancels a running search (before it means "back")."""
        if event.key == "escape" and (self._prompt_mode or self.searching):
            event.stop()
            event.prevent_default()
            if self._search_cancel is not None:
                self._search_cancel.cancel()
            if self._prompt_mode:
                self._close_prompt()
            if self.searching:
                self._search_ended(cancelled=True)

    @on(Input.Submitted, "#logs-prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        mode, value = self._prompt_mode, event.value.strip()
        self._close_prompt()
        if mode == "search":
            self.start_search(value)
        elif mode == "filter":
            self.apply_filter(value)
        elif mode == "time":
            self.jump_to_time(value)

    # ------------------------------------------------------------ actions
    def action_search(self) -> None:
        self._open_prompt(
            "search", "search text (re:PATTERN for a regex; Enter runs, Esc cancels)", self.search_text
        )

    def action_filter(self) -> None:
        self._open_prompt("filter", f"filter: {FILTER_HELP} (empty clears)", self.filter_text)

    def action_goto_time(self) -> None:
        self._open_prompt("time", "jump to time: HH:MM[:SS] or YYYY-MM-DD HH:MM")

    def action_toggle_compact(self) -> None:
        """Ray's prefix as role and rank, or as Ray wrote it (the line itself never changes)."""
        ll = self.lines
        ll.compact = not ll.compact_now
        ll.invalidate()
        self.notify(f"log prefix: {'role and rank' if ll.compact else 'as Ray wrote it'}", timeout=2)

    def action_toggle_wrap(self) -> None:
        self.lines.wrap = not self.lines.wrap
        self._status()

    def action_follow(self) -> None:
        self.lines.resume_follow()
        self._status()

    def action_top(self) -> None:
        self.lines.move_to(0)

    def action_cursor(self, delta: int) -> None:
        self.lines.move_to(self.lines.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.lines.move_to(self.lines.cursor + direction * max(1, self.lines.size.height - 1))

    def action_copy_line(self) -> None:
        ll = self.lines
        if not ll.count:
            return
        text = ll.record(ll.cursor).text
        self.app.copy_to_clipboard(text)
        self.notify(f"copied line {ll.cursor + 1} ({len(text)} chars)", timeout=2)

    def action_next_match(self) -> None:
        self._step_match(1)

    def action_prev_match(self) -> None:
        self._step_match(-1)

    # ------------------------------------------------------------ search
    def start_search(self, text: str) -> None:
        if self._search_cancel is not None:
            self._search_cancel.cancel()
        self.search_text = text
        self.matches, self.match_at = array("I"), -1
        ll = self.lines
        pattern, regex = search_options(text)
        if not pattern:
            ll.pattern = None
            self._search_ended(cancelled=False)
            ll.invalidate()
            return
        try:
            ll.pattern = re.compile(pattern if regex else re.escape(pattern), re.IGNORECASE)
        except re.error as err:
            self.notify(f"bad regex: {err}", severity="warning")
            return
        ll.invalidate()
        if self._store is None:
            self._status()
            return  # nothing to search yet: the pattern still marks lines as they arrive
        self.searching = True
        self._search_cancel = CancelToken()
        bar = self.query_one("#logs-search-progress", ProgressBar)
        bar.update(total=max(1, len(self._store)), progress=0)
        bar.add_class("visible")
        self._status()
        flt = ll.index.filter if ll.index is not None else None
        self._search_worker(self._store, pattern, regex, flt, self._search_cancel)

    @work(thread=True, exclusive=True, group="logs-search", exit_on_error=False)
    def _search_worker(
        self,
        store: LogStore,
        pattern: str,
        regex: bool,
        flt: LineFilter | None,
        cancel: CancelToken,
    ) -> None:
        """Scan the spool block by block; hand the hits to the view as they come (the first at once), and
        the scan's progress every SEARCH_POST_S."""
        found, posted_at, shown = array("I"), 0.0, False
        scanned = stop = 0
        try:
            for batch in search_batches(
                store, pattern, regex=regex, ignore_case=True, flt=flt, cancel=cancel
            ):
                found.extend(batch.hits)
                scanned, stop = batch.scanned, batch.stop
                now = time.monotonic()
                if (found and not shown) or now - posted_at >= SEARCH_POST_S:
                    if _stopped(cancel):
                        return
                    self.app.call_from_thread(self._search_progress, cancel, found, scanned, stop)
                    posted_at, shown, found = now, shown or bool(found), array("I")
        except Exception as err:  # the backend's error becomes a notice, not a crash
            self.app.call_from_thread(self._search_failed, cancel, str(err))
            return
        if not _stopped(cancel):
            self.app.call_from_thread(self._search_done, cancel, found, scanned, stop)

    def _search_failed(self, search: CancelToken, error: str) -> None:
        if search is not self._search_cancel:
            return
        self._search_ended(cancelled=False)
        self.notify(f"search failed: {error}", severity="error")

    def _search_progress(self, search: CancelToken, hits: array, scanned: int, stop: int) -> None:
        """More hits: the first one the operator wants (after the cursor, or the top when following) is
        shown as soon as it is known; the progress bar moves."""
        if search is not self._search_cancel or not self.searching:  # a newer search, or this one was stopped
            return
        self.matches.extend(hits)
        self.query_one("#logs-search-progress", ProgressBar).update(total=max(1, stop), progress=scanned)
        if self.match_at < 0 and self.matches:
            ll = self.lines
            here = ll.store_index(ll.cursor) if ll.count else 0
            if ll.follow or self.matches[-1] > here:
                self._step_match(1, from_cursor=not ll.follow)
        self._status()

    def _search_done(self, search: CancelToken, hits: array, scanned: int, stop: int) -> None:
        if search is not self._search_cancel:
            return
        self._search_progress(search, hits, scanned, stop)
        self._search_ended(cancelled=False)
        if self.matches and self.match_at < 0:
            self._step_match(1, from_cursor=True)  # no hit after the cursor: wrap round to the first
        self._status()

    def _search_ended(self, *, cancelled: bool) -> None:
        self.searching = False
        self.query_one("#logs-search-progress", ProgressBar).remove_class("visible")
        if cancelled:
            self.notify(f"search /{self.search_text} cancelled: {len(self.matches):,} hits so far", timeout=3)
        self._status()

    def _step_match(self, direction: int, *, from_cursor: bool = False) -> None:
        if not self.matches:
            self._status()
            return
        ll = self.lines
        here = ll.store_index(ll.cursor) if ll.count else 0
        if from_cursor or self.match_at < 0:
            # the first hit after the cursor going forward (wrapping round), else the last before it
            i = bisect_left(self.matches, here + (1 if direction > 0 else 0))
            i = i % len(self.matches) if direction > 0 else (i - 1) % len(self.matches)
        else:
            i = (self.match_at + direction) % len(self.matches)
        for _ in range(len(self.matches)):
            pos = self._position_of(self.matches[i])
            if pos is not None:
                self.match_at = i
                ll.move_to(pos, center=True)
                break
            i = (i + direction) % len(self.matches)
        self._status()

    def _position_of(self, store_index: int) -> int | None:
        ll = self.lines
        if ll.index is None:
            return store_index
        idx = ll.index.indices
        j = bisect_left(idx, store_index)
        return j if j < len(idx) and idx[j] == store_index else None

    # ------------------------------------------------------------ filter and time
    def apply_filter(self, text: str) -> None:
        """Show only the lines `text` keeps (empty: every line); a scan still running for the last filter
        stops, and its result is dropped."""
        ll = self.lines
        if not text:
            if self._filter_cancel is not None:
                self._filter_cancel.cancel()
            self.filter_text = ""
            self.filtering = False
            ll.index = None
            ll.invalidate()
            ll.sync()
            self._status()
            return
        try:
            flt = parse_filter(text)
        except FilterSyntaxError as err:
            self.notify(str(err), severity="warning")
            return
        if self._store is None:
            self.notify("no log to filter yet: no run attached", severity="warning")
            return
        if self._filter_cancel is not None:
            self._filter_cancel.cancel()
        self._filter_cancel = CancelToken()
        self.filter_text = text
        self.filtering = True
        self._status()
        self._filter_worker(FilteredLines(self._store, flt), self._filter_cancel)

    @work(thread=True, exclusive=True, group="logs-filter", exit_on_error=False)
    def _filter_worker(self, view: FilteredLines, cancel: CancelToken) -> None:
        """The first scan of a filter can cover millions of lines: off the UI thread, cancellable."""
        try:
            view.refresh(cancel)
        except Exception as err:
            self.app.call_from_thread(self.notify, f"filter failed: {err}", severity="error")
            return
        if not cancel.cancelled and not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._filter_done, view, cancel)

    def _filter_done(self, view: FilteredLines, cancel: CancelToken) -> None:
        if cancel.cancelled:  # cleared or replaced while the scan ended
            return
        self.filtering = False
        view.refresh()  # catch up with lines that arrived during the scan
        ll = self.lines
        ll.index = view
        ll.follow = True
        ll.invalidate()
        ll.sync()
        self._status()

    def jump_to_time(self, text: str) -> None:
        ll = self.lines
        if not ll.count:
            return
        try:
            pos = line_at_time(ll.record, ll.count, text)
        except TimeSyntaxError as err:
            self.notify(str(err), severity="warning")
            return
        ll.move_to(pos, center=True)
        self._status()
