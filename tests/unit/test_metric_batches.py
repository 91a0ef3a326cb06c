"""A chunk's metric records go into the series in one run per key and the alert rules judge each run once
(backend.signals.metrics `add_records`, backend.signals.alerts `judge_run`): the results must be exactly
those of record by record, point by point, whatever the chunk size: the same series, alerts (ids, steps,
counts, order), causes, phases and ranks."""

from __future__ import annotations

import json
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
