"""A chunk's metric records go into the series in one run per key and the alert rules judge each run once
(backend.signals.metrics `add_records`, backend.signals.alerts `judge_run`): the results must be exactly
those of record by record, point by point, whatever the chunk size: the same series, alerts (ids, steps,
counts, order), causes, phases and ranks."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.metrics import MetricRecord, MetricsCollector
from backend.signals.monitor import RunMonitor
from backend.signals.series import Series

NOW = 1_790_000_000.0
CHUNK_SIZES = (1, 137, 2_000, 50_000, 1 << 20)  # characters a chunk reaches to (then its line's end)


def alerting_log() -> str:
    """The sample run with metric values that fire the metric rules (NaN loss, grad-norm spikes), some
    repeated and some once, so episodes begin, go on and end inside one chunk and across chunks."""
    rng = random.Random(33)
    out = []
    for line in generate(SampleRun(rollouts=30, noise_per_rollout=40, train_ranks=4, save_every=10)):
        if "'train/loss'" in line and rng.random() < 0.25:
            line = line.replace("'train/loss': ", "'train/loss': nan, 'x/loss': ", 1)
        if "'train/grad_norm'" in line and rng.random() < 0.3:
            line = line.replace("'train/grad_norm': ", "'train/grad_norm': 1e6, 'x/norm': ", 1)
        out.append(line)
    return sanitize_text("\n".join(out) + "\n")


def observed(text: str, size: int) -> str:
    m = RunMonitor(clock=lambda: NOW)
    i = 0
    while i < len(text):
        end = text.find("\n", i + size)
        end = len(text) if end < 0 else end + 1
        m.on_log_lines(0, 0, text[i:end])
        i = end
    m.input_ended()
    m.tick(now=NOW, dashboard_now=NOW)
    return json.dumps(
        {
            "snapshot": m.snapshot(now=NOW),
            "alerts": [
                dict(a.to_json(), count=a.count, last=a.last_step, cause=a.cause) for a in m.alerts.alerts
            ],
            "failures": [repr(e) for e in m.alerts.failures.events],
            "phases": repr(m.metrics_snapshot(now=NOW).phases),
            "ranks": sorted(m.process_ranks.items()),
        },
        sort_keys=True,
        default=str,
    )


def record_by_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-record path: each record a batch of one, each point added alone (no run appended whole)."""
    batched = MetricsCollector.add_records

    def one_by_one(self: MetricsCollector, records: list[MetricRecord]) -> int:
        ordered = sorted(records, key=lambda r: r.ts if r.ts == r.ts else float("inf"))
        return sum(batched(self, [rec]) for rec in ordered)

    monkeypatch.setattr(MetricsCollector, "add_records", one_by_one)
    monkeypatch.setattr(Series, "extend", lambda self, run: False)


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_a_chunk_at_a_time_equals_record_by_record(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    text = alerting_log()
    batched = observed(text, size)
    fired = json.loads(batched)["alerts"]
    assert {"loss-nonfinite"} <= {a["id"] for a in fired}  # the rules fired: the comparison means something
    assert any(a["count"] > 1 for a in fired)  # and an episode went on over several points
    with monkeypatch.context() as patched:
        record_by_record(patched)
        assert observed(text, size) == batched


def test_runs_appended_whole_equal_points_added_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    text = alerting_log()
    whole = observed(text, 1 << 20)
    monkeypatch.setattr(Series, "extend", lambda self, run: False)
    assert observed(text, 1 << 20) == whole


def _crafted_records(rng: random.Random) -> list[MetricRecord]:
    """Records meant to take every branch of a batch: dict shapes sharing keys at different places, a key's
    first point mid-batch, a non-finite step, steps out of order and repeated, a second printing, records
    without a timestamp, values that fire the rules (NaN loss, a KL spike, a climb)."""
    out = []
    for i in range(400):
        n = i // 2 if rng.random() < 0.8 else rng.randrange(max(1, i))
        values = {"train/step": float(n), "train/loss": rng.choice([0.5, 0.4, math.nan, 0.3])}
        if rng.random() < 0.5:
            values = {"train/ppo_kl": rng.choice([0.01, 0.02, 0.5]), **values}  # the same keys elsewhere
        if rng.random() < 0.05:
            values["train/step"] = rng.choice([math.inf, math.nan])
        if rng.random() < 0.03:
            values[f"train/new_{i}"] = 1.0  # a key seen for the first time, mid-batch
        if rng.random() < 0.3:
            values["train/train_rollout_logprob_abs_diff"] = 0.01 * (i % 7) + 0.02
        ts = NOW + i + rng.random() if rng.random() < 0.95 else math.nan
        out.append(MetricRecord(rng.choice(["step", "step", "rollout"]), n, ts, "actor", values))
        if rng.random() < 0.2:
            out.append(MetricRecord(out[-1].kind, n, ts + 0.5, "actor", dict(values)))  # printed twice
    return out


def _collected(records: list[MetricRecord], size: int, max_points: int, max_series: int) -> str:
    from backend.signals.alerts import AlertEngine
    from backend.signals.series import SeriesSet

    collector = MetricsCollector(max_points)
    collector.series = SeriesSet(max_points, max_series)
    engine = AlertEngine()
    collector.subscribe(engine)
    changed = [collector.add_records(records[i : i + size]) for i in range(0, len(records), size)]
    series = {
        k: (s.steps, [repr(v) for v in s.values], [repr(t) for t in s.ts], list(s.rank), s.thinned, s.version)
        for k, s in collector.series.by_key.items()
    }
    return repr(
        (
            changed,
            list(series.items()),
            list(collector.records_by_prefix.items()),
            collector.bad_steps,
            collector.duplicates,
            collector.series.dropped_keys,
            [dict(a.to_json(), count=a.count, last=a.last_step) for a in engine.alerts],
        )
    )


@pytest.mark.parametrize("size", (1, 7, 64, 1000))
@pytest.mark.parametrize(("max_points", "max_series"), ((4096, 2000), (16, 2000), (40, 4)))
def test_batches_by_dict_shape_equal_the_record_by_record_path(
    size: int, max_points: int, max_series: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouping a chunk by dict shape (SeriesSet.group_batch) gives what grouping record by record gives:
    the same series (points, thinning, versions), prefix counts in the same order, dropped keys and
    steps, and alerts, with small series (thinned often) and a series cap met mid-batch."""
    from backend.signals.series import SeriesSet

    records = _crafted_records(random.Random(size * 31 + max_points))
    batched = _collected(copy.deepcopy(records), size, max_points, max_series)
    assert "nan" in batched and "'count': " in batched  # NaN points stored, and alerts fired
    with monkeypatch.context() as patched:
        record_by_record(patched)
        patched.setattr(SeriesSet, "group_batch", lambda self, rows: None)
        assert _collected(copy.deepcopy(records), size, max_points, max_series) == batched


def test_the_shape_path_is_taken_once_the_keys_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above means something: group_batch does group the usual chunk."""
    from backend.signals.series import SeriesSet

    taken = []
    real = SeriesSet.group_batch

    def spy(self: SeriesSet, rows: list[dict[str, float]]) -> object:
        found = real(self, rows)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(SeriesSet, "group_batch", spy)
    observed(alerting_log(), 50_000)
    assert taken.count(True) > len(taken) // 2
