"""The metric reader's second-round shortcuts give what the long way gives: a line read as the twin of the
one before (miles' second printing of a step dict, read from its head alone) is the record
`parse_metric_line` builds for it; enrichers called only for their declared kinds store the same series; a
batch's counts, highest steps and newest stamp tallied once equal record by record."""

from __future__ import annotations

import math
import random

import pytest

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.grammar import METRIC_LINE
from backend.signals.metrics import (
    Enricher,
    MetricRecord,
    MetricsCollector,
    PayloadCache,
    Twin,
    line_ts,
    parse_metric_line,
    parse_metric_text,
    parse_ts,
)
from backend.signals.monitor import RunMonitor

HEADS = [
    "(MegatronTrainRayActor pid=52001) [2026-08-21 10:00:55.001 actor_cell0_rank0] model.py:854 - ",
    "(MegatronTrainRayActor pid=52001, ip=10.0.0.2) [2026-08-21 10:00:55,001234] model.py:854 - ",
    "(pid=7) [2026-08-21 10:00:55 rank3] a/b.c.py:1 - ",
    "[2026-08-21 10:00:55.001] log_utils.py:542 - ",
    "[2026-08-21 10:00:59.999 x] model.py:854 - ",
    "[2026-13-45 10:00:55.001 x] model.py:854 - ",  # no date: nan
    "[2026-08-21 10:00:55.001 TP0] model.py:854 - ",  # a rank tag, not a proc: the long way
    "\x1b[36m(MegatronTrainRayActor pid=52001)\x1b[0m [2026-08-21 10:00:55.001 a] model.py:854 - ",
    "^[[36m(A pid=1)^[[0m [2026-08-21 10:00:55.001 a] model.py:854 - ",
    "[2026-08-21 10:00:55.001 a] model.py:854 - x - ",  # the tail behind more than a head
    "[2026-08-21 10:00:55.001 a] model.py:854 -  ",
    "(A pid=1) [2026-08-21 10:00:55.001 a] model.py:854: ",
    "",
]
TAILS = [
    "step 3: {'train/loss': 0.5, 'train/grad_norm': 1.25}",
    "critic-step 3: {'critic/loss': nan, 'critic/x': -0}",
    "perf 2: {'perf/rollout_time': np.float64(3.5), 'rollout/raw_reward': 0.25}",
    "rollout 4: {'rollout/raw_reward': 1e400}",
    "eval 1: {'eval/gsm8k': 0.7}",
]


def fields(found: MetricRecord | object) -> object:
    if isinstance(found, MetricRecord):
        return (found.kind, found.n, repr(found.ts), found.proc, repr(found.values), found.source, found.cut)
    return repr(found)


@pytest.mark.parametrize("tail", TAILS)
def test_a_twin_is_the_record_the_long_way_builds(tail: str) -> None:
    first = "[2026-08-21 10:00:55.000 actor_cell0_rank0] log_utils.py:542 - " + tail
    hits = 0
    for head in HEADS:
        for plain in (False, True):
            if plain and ("\x1b" in head or "^[" in head):
                continue
            twin = Twin(plain)
            assert isinstance(parse_metric_line(first, PayloadCache(), twin, plain or None), MetricRecord)
            line = head + tail
            found = twin.record(line)
            if found is not None:
                hits += 1
                assert fields(found) == fields(parse_metric_line(line))
                assert (
                    twin.rec is not None and found.values is not twin.rec.values
                )  # its own dict: enrichers write to a record's
    assert hits >= 2 * 6  # the shortcut was taken for the heads it reads, on both paths


def test_chunks_with_twins_read_as_line_by_line() -> None:
    """Random heads and tails, twins next to each other or not: parse_metric_text's records and problems
    are each line's own, in order."""
    rng = random.Random(7)
    tails = [*TAILS, "step 6: {'a': }", "step 6: {'a': 1, 'b"]  # unreadable, cut
    lines = []
    for _ in range(400):
        tail = rng.choice(tails)
        lines.append(rng.choice(HEADS) + tail)
        if rng.random() < 0.7:
            lines.append(rng.choice(HEADS) + (tail if rng.random() < 0.8 else rng.choice(tails)))
    text = "\n".join(lines) + "\n"
    records, problems = parse_metric_text(text, PayloadCache())
    expected = [parse_metric_line(line) for line in lines]
    assert [fields(r) for r in records] == [fields(e) for e in expected if isinstance(e, MetricRecord)]
    assert [repr(p) for p in problems] == [
        repr(e) for e in expected if e is not None and not isinstance(e, MetricRecord)
    ]
    assert len(records) > 300 and problems


def sample_text() -> str:
    run = SampleRun(rollouts=12, noise_per_rollout=10, train_ranks=2, save_every=4)
    return sanitize_text("\n".join(generate(run)) + "\n")


def observed(
    monitor: RunMonitor, text: str
) -> tuple[dict[str, tuple[list[float], str]], object, object, object]:
    monitor.on_log_lines(0, 0, text)
    col = monitor.collector
    series = {k: (list(s.steps), repr(s.values)) for k, s in col.series.by_key.items()}
    return series, col.records, col.records_by_prefix, monitor.facts.checkpoints


def test_enrichers_called_by_kind_store_what_enrichers_called_always_store() -> None:
    text = sample_text()
    filtered = RunMonitor()
    always = RunMonitor()
    always.collector.enrichers = [Enricher(e.enrich) for e in always.collector.enrichers]
    assert any(e.kinds for e in filtered.collector.enrichers)  # some are filtered
    got = observed(filtered, text)
    assert any(key.startswith("derived/") for key in got[0])  # the filtered enricher ran where it should
    assert got == observed(always, text)


def test_an_enricher_is_called_for_its_kinds_only_in_the_order_added() -> None:
    col = MetricsCollector()
    calls: list[tuple[str, str]] = []
    col.add_enricher(lambda rec: calls.append(("a", rec.kind)), frozenset({"perf-rollout"}))
    col.add_enricher(lambda rec: calls.append(("b", rec.kind)))
    col.add_records(
        [
            MetricRecord("step", 1, 1.0, "p", {"train/loss": 1.0}),
            MetricRecord("perf-rollout", 1, 2.0, "p", {"perf/rollout_time": 1.0}),
        ]
    )
    col.add_enricher(lambda rec: calls.append(("c", rec.kind)), frozenset({"step"}))  # the kinds asked again
    col.add_record(MetricRecord("step", 2, 3.0, "p", {"train/loss": 1.0}))
    assert calls == [
        ("b", "step"),
        ("a", "perf-rollout"),
        ("b", "perf-rollout"),
        ("b", "step"),
        ("c", "step"),
    ]


def tallies(col: MetricsCollector) -> object:
    return dict(col.records), dict(col.last_step), repr(col.last_ts), math.copysign(1, col.last_ts)


def test_a_batch_tallied_once_equals_record_by_record() -> None:
    rng = random.Random(3)
    stamps = [math.nan, 0.0, -0.0, 5.0, 5.0, 7.5, math.inf, -math.inf, 2.0]
    for _ in range(50):
        batch = [
            MetricRecord(
                rng.choice(["step", "rollout", "eval"]),
                rng.randrange(-3, 9),
                rng.choice(stamps),
                "p",
                {"k/x": 1.0},
            )
            for _ in range(rng.randrange(1, 8))
        ]
        whole, single = MetricsCollector(), MetricsCollector()
        whole.add_records([MetricRecord(r.kind, r.n, r.ts, r.proc, dict(r.values)) for r in batch])
        for rec in sorted(batch, key=lambda r: r.ts if math.isfinite(r.ts) else math.inf):
            single.add_record(rec)
        assert tallies(whole) == tallies(single)


def test_a_metric_lines_stamp_reads_as_parse_ts_reads_it() -> None:
    """line_ts's few-character test of the usual shape, on the stamps METRIC_LINE lets through: other
    separators, fractions, seconds past 59, dates that are none, non-ASCII digits."""
    rng = random.Random(11)
    digits = "0123456789" * 6 + "\u0663\u0967"
    seen = set()
    for _ in range(3000):
        d = "".join(rng.choice(digits) for _ in range(14))
        frac = rng.choice(["", "." + d[:3], "," + d[:3], "." + d[:6], ".000", "." + d[:4]])
        stamp = f"{rng.choice(['2026', d[:4]])}-{rng.choice(['08', d[4:6]])}-{d[6:8]}{rng.choice(' T')}"
        stamp += f"{d[8:10]}:{d[10:12]}:{rng.choice([d[12:14], '59', '60'])}{frac}"
        line = f"[{stamp} a] m.py:1 - step 1: {{'a': 1}}"
        if METRIC_LINE.fullmatch(line) is None:
            continue
        seen.add(len(stamp) == 23 and stamp.isascii())
        assert repr(line_ts(stamp)) == repr(parse_ts(stamp)), stamp
    assert seen == {True, False}
    for stamp in ("2026-08-21 10:00:5\u0663.000", "2026-08-21 10:00:55.00\u0663", "2026-08-21 10:00:60.000"):
        assert METRIC_LINE.fullmatch(f"[{stamp}] m.py:1 - step 1: {{}}") is not None
        assert repr(line_ts(stamp)) == repr(parse_ts(stamp)), stamp
