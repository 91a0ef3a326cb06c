"""The replay's rollout index (pure): where each rollout starts in a log of any miles shape, arriving in
chunks cut anywhere; and the dump-as-log lines it also reads."""

from __future__ import annotations

import math
import re

from backend.demo import sample_log
from backend.signals.metrics import MetricRecord
from backend.signals.replay import RolloutIndex, dump_log_text, record_line

_NEW_BRACKET = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.\d{3} [^\]]+\]")


def _lines(shape: str) -> list[str]:
    lines = list(sample_log.generate(sample_log.SampleRun(rollouts=4, noise_per_rollout=6)))
    if shape == "2026-04":
        lines = [_NEW_BRACKET.sub(r"[\1]", ln) for ln in lines]
    if shape == "bare":  # train.py run without Ray's prefix, or a pasted log
        lines = [re.sub(r"^.*? - ((?:step|perf|rollout) \d+: \{)", r"\1", ln) for ln in lines]
    return lines


def _index(lines: list[str], chunk: int) -> RolloutIndex:
    index = RolloutIndex()
    for first in range(0, len(lines), chunk):
        part = lines[first : first + chunk]
        index.on_lines(first, len(part), "\n".join(part) + "\n")
    return index


def test_rollout_starts_after_the_line_that_closed_the_previous_one():
    for shape in ("newest", "2026-04", "bare"):
        lines = _lines(shape)
        for chunk in (7, 1000):
            index = _index(lines, chunk)
            assert index.rollouts == [0, 1, 2, 3], (shape, chunk)
            assert index.mark(0).first_line == 0 and index.mark(0).first_step == 0
            for n in (1, 2, 3):
                mark = index.mark(n)
                assert re.search(rf"\bperf {n - 1}: \{{", lines[mark.first_line - 1]), (shape, n)
                assert not any(
                    re.search(rf"\b(perf|rollout) {n - 1}: \{{", ln) for ln in lines[mark.first_line :]
                )
                assert mark.first_step == 2 * n


def test_cursor_steps_and_clamps():
    index = _index(_lines("newest"), 1000)

    def n(at: int | None, by: int) -> int:
        mark = index.step(at, by)
        assert mark is not None
        return mark.n

    assert n(None, 1) == 0 and n(None, -1) == 3
    assert n(3, 1) == 3 and n(0, -1) == 0
    assert n(1, 1) == 2 and n(2, -1) == 1
    assert RolloutIndex().step(None, 1) is None


def test_dump_records_become_log_lines_in_time_order():
    late = MetricRecord("perf-train", 0, 1755770456.0, "actor_cell0_rank0", {"perf/train_time": 12.7})
    early = MetricRecord(
        "step", 1, 1755770405.5, "actor_cell0_rank0", {"train/loss": -0.001, "train/step": 1.0}
    )
    undated = MetricRecord("rollout", 0, math.nan, "rollout_manager", {"rollout/raw_reward": 0.5})
    text = dump_log_text([late, early, undated])
    assert text.splitlines() == [record_line(undated), record_line(early), record_line(late)]
    assert record_line(early) == (
        "[2025-08-21 10:00:05.500 actor_cell0_rank0] events - step 1: "
        "{'train/loss': -0.001, 'train/step': 1.0}"
    )
    assert record_line(late).endswith("events - perf 0: {'perf/train_time': 12.7}")


def test_a_log_dense_with_braces_is_indexed_the_same():
    """Past DENSE_BRACES `{` in a chunk the index searches `: {` whole: the same rollouts and marks as the
    brace-by-brace way, wherever in the chunk the switch falls."""
    lines = _lines("newest")
    for noise_at in (0, 3, len(lines) // 2):
        json_noise = ['{"event": {"k": {}}} {{{ :{ : ' * 40] * 40  # > DENSE_BRACES braces, no metric head
        dense = lines[:noise_at] + json_noise + lines[noise_at:]
        index = _index(dense, 10_000)
        assert index.rollouts == [0, 1, 2, 3]
        for n in (1, 2, 3):
            mark = index.mark(n)
            assert re.search(rf"\bperf {n - 1}: \{{", dense[mark.first_line - 1]), (noise_at, n)
            assert mark.first_step == 2 * n
