"""A chunk read whole (`_read_chunk`: one findall for its lines, one JSON scan for its payloads) gives the
records and problems that reading it line by line (`_read_lines`, each payload on its own) gives, on random
and hostile chunks: payloads that only parse together, `-0` and long integers, twins, lines that are no
metric; and `_json_batch` reads each payload as json_payload does, or refuses the lot."""

from __future__ import annotations

import random

import pytest

from backend.signals.grammar import METRIC_NEEDLES
from backend.signals.metrics import (
    MetricRecord,
    PayloadCache,
    _json_batch,
    _read_chunk,
    _read_lines,
    json_clean,
    json_payload,
    parse_metric_text,
)
from tests.unit.test_metric_fast_path import HOSTILE, _random_payload

HEADS = [
    "(MegatronTrainRayActor pid=52001) [2026-08-21 10:00:55.000 actor_cell0_rank0] log_utils.py:542 - ",
    "(MegatronTrainRayActor pid=52001) [2026-08-21 10:00:55.001 actor_cell0_rank0] model.py:854 - ",
    "(A pid=7, ip=10.0.0.2) [2026-08-21 10:00:59,001234] a/b.c.py:1 - ",
    "[2026-08-21 10:00:55.001] log_utils.py:542 - ",
    "[2026-13-45 10:00:55.001 x] model.py:854 - ",
    "[2026-08-21 10:00:55.001 TP0] model.py:854 - ",
    "[EVAL RESULT] ",
    "INFO x.py:3: ",
    "",
]
KINDS = ["step 3", "step 4", "critic-step 1", "perf 2", "rollout 5", "eval 1", "passrate 0", "step 007"]
PAYLOADS = [
    "{'train/loss': 0.5, 'train/grad_norm': 1.25, 'train/lr-pg_0': 1e-06}",
    "{'perf/rollout_time': np.float64(3.5), 'rollout/raw_reward': 0.25}",
    "{'perf/step_time': 4.0, 'perf/actor_train_mfu': 0.3}",
    "{'a': -0, 'b': 1e-0, 'c': -0.0}",
    "{'a': 1, 'b': 123456789012345678901234567890, 'c': " + "9" * 400 + "}",
    "{'a': 1}, {'b': 2}",  # two dicts in one payload
    "{'a': 1, 'k}",  # these two parse only together
    "{': 2}",
    "{': x': np.float64(1.5)}",
    "{'a': 1, 'b'}",
    "{'a': 1, 'b': 2",
]
OTHER = ["eval 2 skipped: no data", "config: {'lr': 1}", "Finish rollout 3: {", "plain line", "x"]


def _fields(rec: MetricRecord) -> tuple[object, ...]:
    return (rec.kind, rec.n, repr(rec.ts), rec.proc, repr(rec.values), rec.source, rec.cut)


def _same(text: str) -> None:
    lines = _read_lines(text, PayloadCache(), "\x1b" not in text and "^[" not in text)
    whole = parse_metric_text(text, PayloadCache())
    assert [_fields(r) for r in whole[0]] == [_fields(r) for r in lines[0]]
    assert [repr(p) for p in whole[1]] == [repr(p) for p in lines[1]]


def _random_chunk(rng: random.Random, payloads: list[str]) -> str:
    out: list[str] = []
    for _ in range(rng.randint(1, 40)):
        if rng.random() < 0.1:
            out.append(rng.choice(HEADS) + rng.choice(OTHER))
            continue
        message = f"{rng.choice(KINDS)}: {rng.choice(payloads)}"
        out.append(rng.choice(HEADS) + message)
        while rng.random() < 0.5:  # a twin, or the same dict behind another head
            out.append(rng.choice(HEADS) + message)
    return "\n".join(out) + rng.choice(["\n", "", "\n\n"])


def test_random_chunks_read_whole_as_line_by_line() -> None:
    rng = random.Random(33)
    usual = PAYLOADS[:5]
    for _ in range(600):
        _same(_random_chunk(rng, usual))  # mostly read whole
        _same(_random_chunk(rng, PAYLOADS))  # hostile ones: refused whole, or read the same
        _same(_random_chunk(rng, [_random_payload(rng) for _ in range(6)]))


def test_the_usual_chunk_is_read_whole() -> None:
    text = "\n".join(h + f"step 3: {PAYLOADS[0]}" for h in HEADS[:4]) + "\n" + HEADS[0] + OTHER[0] + "\n"
    assert json_clean(text) and _read_chunk(text, None) is not None
    _same(text)


@pytest.mark.parametrize("seed", range(40))
def test_json_batch_reads_each_payload_as_json_payload(seed: int) -> None:
    rng = random.Random(seed)
    pool = [p for p in HOSTILE + PAYLOADS if json_clean(p)]
    for _ in range(50):
        payloads = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        got = _json_batch(payloads)
        alone = [json_payload(p) for p in payloads]
        if got is not None:
            assert [repr(v) for v in got] == [repr(v) for v in alone], payloads
        else:
            assert None in alone or any(": " in p for p in payloads), payloads


def test_payloads_that_parse_only_together_are_refused() -> None:
    assert _json_batch(["{'z': 1}, {'w': 1}", "{'a': 1, 'k}", "{': 2}"]) is None
    assert repr(_json_batch(["{'a': -0, 'b': 5}", "{'c': -0.0}"])) == "[{'a': 0.0, 'b': 5.0}, {'c': -0.0}]"


def test_the_chunk_needles_are_the_grammars() -> None:
    assert METRIC_NEEDLES == (": {", " skipped: ")  # _read_chunk checks them inline
