"""The filter language, role-aware actor matching and the time index, in backend (the view only asks)."""

from __future__ import annotations

import pytest

from backend.signals.filters import (
    FilteredLines,
    FilterSyntaxError,
    LineFilter,
    TimeSyntaxError,
    line_at_time,
    parse_filter,
    parse_time,
)
from backend.signals.store import LogStore


def test_operator_input_parsing() -> None:
    flt = parse_filter("RolloutManager rank:3 node:10.0.0.7 level:warning")
    assert (flt.actor, flt.rank, flt.node, flt.min_level) == ("RolloutManager", 3, "10.0.0.7", "warning")
    assert parse_filter("ip:10.0.0.2 pid:7 proc:main") == LineFilter(node="10.0.0.2", pid=7, proc="main")
    for bad, word in (("rank:x", "rank"), ("colour:red", "colour"), ("level:loud", "level")):
        with pytest.raises(FilterSyntaxError, match=word):
            parse_filter(bad)
    assert parse_time("12:05", "2026-01-01 11:00:00.000") == "2026-01-01 12:05:00"
    assert parse_time("2026-02-03 04:05:06", None) == "2026-02-03 04:05:06"
    with pytest.raises(TimeSyntaxError):
        parse_time("noon", None)


def test_actor_filter_by_role_knows_every_version(tmp_path) -> None:
    """`actor:train` keeps the train actors of 2026-04 and of the newest miles alike; `actor:rollout` both
    rollout names; a part of a class name works too."""
    with LogStore(tmp_path, "r") as store:
        store.append(
            "(MegatronTrainRayActor pid=1) [2026-03-02 10:00:05] log_utils.py:443 - a\n"
            "(MegatronTrainRayActorWithConcurrencyGroups pid=2) [2026-10-02 10:00:05.120 actor_cell0_rank1] "
            "x.py:1 - b\n(RolloutManager pid=3) [2026-03-02 10:00:06] metrics.py:89 - c\n"
            "(RolloutExecutor pid=4) [2026-10-02 10:00:06.000 rollout_executor] metrics.py:90 - d\n"
            "(SGLangEngine pid=5) [2026-03-02 10:00:07 DP0 TP0 EP3] Decode batch\n"
            "[2026-03-02 10:00:08] train.py:9 - driver line\n"
        )

        def shown(flt: LineFilter) -> list[str]:
            view = FilteredLines(store, flt)
            view.refresh()
            return [view.line(k).message for k in range(len(view))]

        assert shown(parse_filter("actor:train")) == ["a", "b"]
        assert shown(parse_filter("rollout")) == ["c", "d"]
        assert shown(parse_filter("actor:engine")) == ["Decode batch"]
        assert shown(parse_filter("actor:concurrency")) == ["b"]
        assert shown(parse_filter("rank:1")) == ["b"]  # only the newest bracket names a rank
        assert shown(parse_filter("rank:0")) == []  # SGLang's TP0 is not a training rank; 2026-04 names none
        assert shown(parse_filter("proc:main")) == shown(parse_filter("actor:driver")) == ["driver line"]
        assert store.line(5).proc is None  # the 2026-04 bracket names no process: none is made up
        assert store.line(4).tags == "DP0 TP0 EP3" and store.line(4).rank is None


def test_line_at_time_leans_on_neighbours(tmp_path) -> None:
    with LogStore(tmp_path, "t") as store:
        store.append(
            "[2026-03-02 10:00:00] a.py:1 - first\n"
            "Traceback (most recent call last):\n"  # no stamp: leans on the line before
            "(RolloutManager pid=3) [2026-03-02 10:05:00.500 rollout_manager] m.py:2 - second\n"
            "(SGLangEngine pid=5) [2026-03-02 10:10:00 TP0] third\n"
            "[2026-03-02T10:15:00] fourth\n"
        )
        count = len(store)
        assert line_at_time(store.line, count, "10:05") == 2
        assert line_at_time(store.line, count, "10:06") == 3
        assert line_at_time(store.line, count, "2026-03-02 10:12") == 4
        assert line_at_time(store.line, count, "09:00") == 0
        assert line_at_time(store.line, count, "23:00") == count - 1
        assert line_at_time(store.line, 0, "10:00") == 0
