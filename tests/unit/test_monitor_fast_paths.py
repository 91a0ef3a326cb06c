"""The monitor's fast paths (the flat-payload reader, the anchored hint search, the rank lines found by
str.find, metric rules skipped for keys without one) change nothing: the same values, hits, series and
alerts as the general code they stand in for."""

from __future__ import annotations

import random

import pytest

from backend.demo.sample_log import SampleRun, generate
from backend.signals import metrics
from backend.signals.anchors import AnchoredHints, _occurrences, choose_anchors
from backend.signals.failures.catalog import default_catalog
from backend.signals.failures.scanner import FailureScanner
from backend.signals.metrics import _scalars, flat_payload, parse_payload
from backend.signals.monitor import RunMonitor
from backend.signals.series import Series


def _naive(text: str, hints: list[str]) -> dict[str, list[int]]:
    out = {h: _occurrences(text, h, overlapping=False) for h in hints}
    return {h: found for h, found in out.items() if found}


def test_every_catalog_example_is_found_through_the_anchors() -> None:
    catalog = default_catalog()
    anchored = FailureScanner(catalog)._anchors
    for kind in catalog.specific:
        assert kind.examples, kind.id
        for example in kind.examples:
            found = anchored.find_all(example)
            assert found == _naive(example, anchored.hints), kind.id
            assert any(h in found for h in kind.hints), (kind.id, example)


def test_every_hint_holds_an_anchor_even_a_new_one() -> None:
    hints = [*default_catalog().hints(), "a brand-new failure", "xyz", "aaaaaa"]
    anchors = choose_anchors(hints)
    assert all(any(a in h for a in anchors) for h in hints)


def _greedy_anchors(hints: list[str], given: list[str]) -> list[str]:
    """The anchor choice as specified: greedily the piece (5..16 characters, or a short hint whole) held by
    the most hints not yet covered, longer first, the first seen on a tie; hints counted one by one."""
    chosen = list(given)
    left = [h for h in dict.fromkeys(hints) if h and not any(a in h for a in chosen)]
    while left:
        cands: dict[str, None] = {}
        for hint in left:
            if len(hint) < 5:
                cands[hint] = None
                continue
            for i in range(len(hint) - 4):
                for j in range(i + 5, min(len(hint), i + 16) + 1):
                    cands[hint[i:j]] = None
        best = max(cands, key=lambda sub: (sum(sub in h for h in left), len(sub)))
        chosen.append(best)
        left = [h for h in left if best not in h]
    return chosen


@pytest.mark.parametrize("seed", range(3))
def test_anchors_counted_once_per_hint_are_the_greedy_choice(seed: int) -> None:
    rng = random.Random(seed)
    assert choose_anchors(default_catalog().hints()) == _greedy_anchors(list(default_catalog().hints()), [])
    for trial in range(100):
        hints = [
            "".join(rng.choice("abcd ") for _ in range(rng.randint(1, 24))) for _ in range(rng.randint(1, 9))
        ]
        given = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 3)))] if trial % 3 == 0 else []
        assert choose_anchors(hints, given) == _greedy_anchors(hints, given), (hints, given)


@pytest.mark.parametrize("seed", range(5))
def test_anchored_positions_equal_repeated_find(seed: int) -> None:
    rng = random.Random(seed)
    hints = ["aaaa", "aaaaaa", "abab", "ababab", "CUDA out of memory", "out of mem", "' failed", "b"]
    anchored = AnchoredHints(hints)
    pieces = ["a", "b", "ab", "aaa", "CUDA out of memory", "' failed", " ", "x"]
    for _ in range(50):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        assert anchored.find_all(text) == _naive(text, anchored.hints), text


@pytest.mark.parametrize(
    "payload",
    [
        "{}",
        "{'a': 1}",
        "{'a': -0, 'b': -0.0, 'c': 0e0, 'd': -0e0, 'e': 1e-06, 'f': 1.5E3, 'g': 1.}",
        "{'a': 12345678901234567890123, 'b': 1e999, 'c': -1e999, 'd': 0.1000000000000000055511151231257827}",
        "{'a': np.float64(0.25), 'b': np.float32(-0), 'c': np.float16(-0.0), 'd': 3}",
        "{'a': 1, 'a': 2, 'b': 3}",
        "{'k/with spaces@1': 2.5}",
    ],
)
def test_flat_payload_reads_what_the_parser_reads(payload: str) -> None:
    fast = flat_payload(payload)
    assert fast is not None
    slow = _scalars(parse_payload(payload))
    assert list(fast.items()) == list(slow.items())
    assert [str(v) for v in fast.values()] == [str(v) for v in slow.values()]  # -0.0 vs 0.0 too


@pytest.mark.parametrize(
    "payload",
    [
        "{'a': nan}",
        "{'a': 007}",
        "{'a': 1_000}",
        '{"a": 1}',
        "{'a\\'b': 1}",
        "{'a': [1, 2]}",
        "{'a': True}",
        "{'a': np.int64(3)}",
        "{'a': 1,}",
        "{'a':1}",
        "{'a': 'x'}",
        "{'a\tb': 1}",
        "{'a': -np.float64(1)}",
    ],
)
def test_flat_payload_leaves_other_shapes_to_the_parser(payload: str) -> None:
    assert flat_payload(payload) is None


def _mixed_log() -> str:
    """A long run's log with every failure example and non-finite metrics mixed into the noise."""
    lines = list(generate(SampleRun(rollouts=40, noise_per_rollout=200, train_ranks=8, save_every=10)))
    examples = [e for kind in default_catalog().specific for e in kind.examples]
    rng = random.Random(7)
    for example in examples:
        lines.insert(rng.randrange(len(lines)), example)
    stamp = "[2026-08-21 11:00:00.000 actor_cell0_rank0] model.py:854 - "
    lines.append(
        stamp + "step 900: {'train/loss': nan, 'train/grad_norm': inf, 'train/pg_loss': np.float64(0.5)}"
    )
    lines.append(stamp + "step 901: {'train/loss': -0, 'train/grad_norm': 1e9, 'train/kl': 1_0}")
    return "\n".join(lines) + "\n"


def _run(text: str) -> dict:
    mon = RunMonitor(clock=lambda: 0.0)
    for i in range(0, len(text), 50_000):  # chunks of complete lines, as the store hands them over
        start = text.rfind("\n", 0, i) + 1 if i else 0
        end = text.rfind("\n", 0, i + 50_000) + 1 if i + 50_000 < len(text) else len(text)
        if end > start:
            mon.on_log_lines(0, 0, text[start:end])
    mon.input_ended()
    snap = mon.snapshot(now=0.0)
    return {
        "series": snap["series"],
        "alerts": snap["alerts"],
        "cause": snap["cause"],
        "ranks": mon.process_ranks,
        "events": [e.frozen() for e in mon.alerts.failures.events],
    }


def test_series_and_alerts_are_identical_without_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _mixed_log()
    fast = _run(text)
    assert fast["alerts"] and fast["series"] and fast["events"] and fast["ranks"]
    monkeypatch.setattr(metrics, "flat_payload", lambda payload: None)
    monkeypatch.setattr(AnchoredHints, "find_all", lambda self, text: _naive(text, self.hints))
    monkeypatch.setattr(Series, "extend", lambda self, run: False)  # every point added and judged alone
    slow = _run(text)
    assert repr(fast) == repr(slow)
