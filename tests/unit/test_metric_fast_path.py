"""The metric reader's fast paths read exactly what the general parser reads: `json_payload` (a repr's quotes
swapped and read by the C JSON scanner) gives `_scalars(parse_payload(payload))`'s values or nothing, on
hostile payloads too (quotes in keys, JSON-only words, numbers at and past a float's range, odd whitespace),
and `parse_ts`'s per-minute reading gives datetime's float."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from backend.signals.metrics import (
    LiteralError,
    _payload_values,
    _scalars,
    _stamp_ts,
    json_payload,
    parse_payload,
    parse_ts,
)

EDGE = 2**1024 - 2**970  # the smallest integer a float rounds to infinity
HOSTILE = [
    "{}",
    "{'a': 1, 'b': 2.5}",
    "{'a': -0, 'b': -0.0, 'c': 0, 'd': -0e0, 'e': -0E5, 'f': 0.0}",
    "{'a': 1e400, 'b': -1e400, 'c': 1e-400, 'd': 1.7976931348623157e308}",
    f"{{'a': {EDGE}, 'b': {EDGE - 1}, 'c': -{EDGE}, 'd': {2**1024}, 'e': {'9' * 400}, 'f': -{'9' * 400}}}",
    "{'a': " + "1" * 5000 + "}",  # past Python's 4300 digits: the parser refuses it
    "{'a': 12345678901234567890123456789, 'b': 0.1000000000000000055511151231257827}",
    "{'a': 1, 'b': 2, 'a': 3}",  # a duplicate key: the last value, the first place
    "{'a': true, 'a': 1}",  # a JSON word hidden by a duplicate: still no Python literal
    "{'a': [null], 'a': 1}",
    "{'a': 'x', 'a': 1}",
    "{'a': {'b': nan}, 'a': 1}",
    "{'a':1}",
    "{ 'a' : 1 , 'b' :2 }",
    "{'a':\t1}",
    "{'a':\n1}",
    "{'a':\r1}",
    "{\r\n'a': 1}",
    "{'a':\x0c1}",
    "{'a': True}",
    "{'a': False, 'b': 1}",
    "{'a': None}",
    "{'a': true}",
    "{'a': false}",
    "{'a': null}",
    "{'a': nan}",
    "{'a': inf, 'b': -inf}",
    "{'a': NaN}",
    "{'a': Infinity}",
    "{'a': -Infinity}",
    "{'a': {'b': 1}}",
    "{'a': [1, 2]}",
    "{'a': (1)}",
    "{'a': 'x'}",
    "{'a': 1, 'b': 'x'}",
    "{'it\"s': 1}",
    '{"a": 1}',
    "{'a': 1, \"b\": 2}",
    "{'a\\'b': 1}",
    "{'a\\\\': 1}",
    "{'a\tb': 1}",
    "{'it's': 1}",
    "{b'a': 1}",
    "{u'a': 1}",
    "{'''a''': 1}",
    "{'a' 'b': 1}",
    "{'ключ/ü': 1.5, 'a\u2028b': 2}",
    "{'a': np.float64(0.5)}",
    "{'a': np.float64(1), 'b': 2}",
    "{': np.float64(1), ': 2}",
    "{'a': 1, ': np.float64(1), ': 2}",  # a key that begins `: np.float64(`: the rewrite would change it
    "{'': np.float64(1), 'b': np.float32(-0), 'c': np.float16(1e5), 'd': np.float64(-0.0)}",
    "{'a': np.float64(1, 'b': 2)}",
    "{'a': np.float64(1)), 'b': 2}",
    "{'a': np.float64(1e5000)}",
    "{'a': np.float64(00)}",
    "{'a': np.float64( 1)}",
    "{'a': np.float64(nan)}",
    "{'a': np.int64(3)}",
    "{'a': np.float64(" + "9" * 41 + ")}",
    "{'a': 'x: np.float64(1)'}",
    "{'a: np.float64(1)': 2}",
    "{'a': np.float64(true)}",
    "{'a': 1_000}",
    "{'a': 01}",
    "{'a': 1.}",
    "{'a': .5}",
    "{'a': +1}",
    "{'a': 0x10}",
    "{'a': 1j}",
    "{'a': 1,}",
    "{'a': 1} {'b': 2}",
    "{'a': 1}}",
    "{1: 2}",
    "{'a': 1, 2: 3}",
    "{1, 2}",
    "{'a': " * 3000 + "1" + "}" * 3000,
    "{" + ", ".join(f"'k{i}': {i}.5" for i in range(5000)) + "}",  # past literal_eval's size cap
]


def _slow(payload: str) -> dict[str, float] | None:
    """What the general parser makes of a payload: its scalars, or None where it is unreadable."""
    try:
        raw = parse_payload(payload)
    except (LiteralError, ValueError, RecursionError):
        return None
    return _scalars(raw) if isinstance(raw, dict) else None


def _exact(values: dict[str, float] | None) -> list[tuple[str, str]] | None:
    """Keys, their order and each value's repr (so -0.0 is not 0.0 and a NaN equals a NaN)."""
    return None if values is None else [(k, repr(v)) for k, v in values.items()]


@pytest.mark.parametrize("payload", HOSTILE, ids=range(len(HOSTILE)))
def test_the_json_path_reads_what_the_parser_reads_or_nothing(payload: str) -> None:
    fast = json_payload(payload)
    slow = _slow(payload)
    if fast is not None:
        assert _exact(fast) == _exact(slow)
    chained = _payload_values(payload, None)
    assert _exact(chained if isinstance(chained, dict) else None) == _exact(slow)


def test_the_json_path_takes_the_usual_shapes() -> None:
    """The comparison above means something: the fast path does read plain metric dicts."""
    accepted = [p for p in HOSTILE if json_payload(p) is not None]
    assert len(accepted) >= 10
    assert json_payload("{'train/loss': 0.5, 'train/step': 3, 'x': -0}") == {
        "train/loss": 0.5,
        "train/step": 3.0,
        "x": 0.0,
    }
    assert str(json_payload("{'a': -0}")) == "{'a': 0.0}"  # the int 0, as the parser reads `-0`


def _random_payload(rng: random.Random) -> str:
    keys = [
        "'a'",
        "'b/c'",
        "'a'",
        "'it\"s'",
        "'x y'",
        "1",
        "'\\t'",
        "'é'",
        "''",
        "': np.float64(1), '",
        "'np.float64(2)'",
    ]
    values = [
        "1",
        "-0",
        "2.5",
        "-0.0",
        "1e400",
        "nan",
        "NaN",
        "True",
        "true",
        "null",
        "None",
        "'s'",
        "[1]",
        "{}",
    ]
    values += [
        "np.float64(0.5)",
        "np.float32(-0)",
        "np.float64(1e5)",
        "np.float64(-0.0)",
        "9" * 330,
        "1_0",
        "01",
        "1.",
        "-1e-400",
        "(2)",
        "Infinity",
    ]
    seps = [", ", ",", " , ", ",\t", ",\n"]
    pairs = [
        f"{rng.choice(keys)}{rng.choice([': ', ':', ' : '])}{rng.choice(values)}"
        for _ in range(rng.randint(0, 5))
    ]
    body = "".join(p + (rng.choice(seps) if i < len(pairs) - 1 else "") for i, p in enumerate(pairs))
    return "{" + body + rng.choice(["", "", ",", " "]) + "}"


def test_random_payloads_read_the_same_by_every_path() -> None:
    rng = random.Random(33)
    taken = 0
    for _ in range(6000):
        payload = _random_payload(rng)
        fast = json_payload(payload)
        slow = _slow(payload)
        if fast is not None:
            taken += 1
            assert _exact(fast) == _exact(slow), payload
        chained = _payload_values(payload, None)
        assert _exact(chained if isinstance(chained, dict) else None) == _exact(slow), payload
    assert taken > 100


def test_stamps_read_per_minute_equal_datetime() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        day = f"{rng.randint(1, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}"
        clock = f"{rng.randint(0, 24):02d}:{rng.randint(0, 60):02d}:{rng.randint(0, 61):02d}"
        stamp = f"{day}{rng.choice(' T')}{clock}.{rng.randint(0, 999):03d}"
        fast, slow = parse_ts(stamp), _stamp_ts(stamp)
        assert fast == slow or (math.isnan(fast) and math.isnan(slow)), stamp
    moment = datetime(2026, 8, 21, 10, 20, 5, 112000, tzinfo=UTC).timestamp()
    assert parse_ts("2026-08-21 10:20:05.112") == moment
    assert math.isnan(parse_ts("2026-08-21 10:20:60.000"))
    assert math.isnan(parse_ts("2026-08-2١ 10:20:05.112"))  # a non-ASCII digit is no stamp here
    assert parse_ts("2026-08-21 10:20:05") == moment - 0.112
