"""Substring search over spool blocks: the dense (flag byte per line) and sparse (hit by hit) paths must
give exactly the lines a plain per-line `in` test gives, at any block size and hit density."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest
from log_search import hits

from backend.signals.store import LogStore

WORDS = (
    "gen throughput",
    "Traceback",
    "TRACEBACK",
    "traceBack x",
    "aa",
    "aaa",
    "step 17:",
    "é",
    "école",
    "x",
)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Iterator[tuple[LogStore, list[str]]]:
    """Lines with 0-4 words each (so some lines hit a needle
    several times), a dense stretch and a rare one."""
    rng = random.Random(7)
    lines = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
        + "".join(rng.choice("ab cA") for _ in range(rng.randint(0, 6)))
        for _ in range(6000)
    ]
    lines += ["only rare here"] * 3000 + ["dense dense dense"] * 3000
    store = LogStore(tmp_path_factory.mktemp("spool"), run_id="mixed")
    store.append("\n".join(lines) + "\n")
    yield store, [store.text(i) for i in range(len(store))]
    store.close()


@pytest.mark.parametrize("block_bytes", [1 << 8, 1 << 14, 1 << 20])
@pytest.mark.parametrize(
    "pattern",
    [
        "gen throughput",
        "traceback",
        "aa",
        "a",
        "aaa",
        "x",
        "é",
        "dense",
        "rare",
        "ab",
        "step 17:",
        " ",
        "zzz",
    ],
)
def test_substring_hits_equal_per_line_test(mixed, pattern: str, block_bytes: int) -> None:
    store, texts = mixed
    assert hits(store, pattern, block_bytes=block_bytes) == [i for i, t in enumerate(texts) if pattern in t]
    folded = re.compile(re.escape(pattern), re.IGNORECASE)
    got = hits(store, pattern.upper(), ignore_case=True, block_bytes=block_bytes)
    assert got == [i for i, t in enumerate(texts) if folded.search(t)]


def test_dense_hits_count_each_line_once_and_newline_never_matches(mixed) -> None:
    store, texts = mixed
    dense = hits(store, "dense")
    assert len(dense) == 3000 and dense == sorted(set(dense))  # 3 hits per line, one index per line
    assert hits(store, "rare here\nonly") == []  # a needle across two lines is no line's text
    assert hits(store, "dense", start=len(texts) - 10) == list(range(len(texts) - 10, len(texts)))
