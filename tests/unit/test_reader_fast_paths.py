"""The readers' fast paths (issue 33) read exactly what their general paths read: the flat needles found
in the text with their wrap marks (hyperscan) vs the copy without breaks, the line numbers primed in one
pass vs str.count, miles' Timer line by one match vs parse_line, the train actors' lookahead of known
processes vs the plain regex. Each test also checks that its fast path ran, so a broken one cannot pass by
falling back."""

from __future__ import annotations

import random
import re

import pytest
from every_start import every_start

from backend.signals import rank_phases
from backend.signals.grammar import parse_line
from backend.signals.prefilter import LineNumbers, Needles, Prefilter, wrap_marks
from backend.signals.rank_phases import _TIMER_HEAD, _TIMER_LINE, _timer_line_parsed, timer_line, timer_stamp
from backend.signals.scan_engine import HYPERSCAN, PURE, make_engine
from backend.signals.shim_reports import _TRAIN_PREFIX, ShimLedger, alternation

# ---------------------------------------------------------------- flat needles without the copy

FLAT = ("CUDA out of memory", "Error", "ab", "x", "[rank", "aXa")


def random_text(rng: random.Random) -> str:
    pieces = [*FLAT, "\n", "\n", "\n\n", "a", "b", " ", "X", "C", "█", "noise line "]
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
    if rng.random() < 0.5:  # a needle hard-wrapped somewhere
        needle = rng.choice(FLAT)
        cut = rng.randint(0, len(needle))
        text += needle[:cut] + "\n" * rng.randint(1, 3) + needle[cut:]
    return text


@pytest.mark.parametrize("engine", [PURE, HYPERSCAN])
def test_flat_needles_are_found_as_in_the_copy_without_breaks_wrapped_or_not(engine: str) -> None:
    pytest.importorskip("hyperscan")
    rng = random.Random(33)
    prefilter = Prefilter(Needles(("Timer ",), FLAT), make_engine(engine))
    in_text = 0
    for _ in range(600):
        text = random_text(rng)
        scan = prefilter.scan(text)
        flat = text.replace("\n", "")
        assert scan.found == {n: s for n in FLAT if (s := every_start(flat, n))}, text
        assert all(scan.has(n) == (n in flat) for n in FLAT), text
        assert scan.flat == flat
        in_text += scan.flat_at is not None
    if engine == HYPERSCAN:
        assert 100 < in_text < 600  # most chunks without a copy, the wrapped ones with one


def test_every_wrapped_occurrence_leaves_a_mark_in_the_text() -> None:
    """The marks' proof, by brute force: a needle cut anywhere by any number of breaks holds a mark."""
    marks = wrap_marks(FLAT)
    for needle in FLAT:
        for cut in range(1, len(needle)):
            for breaks in (1, 2, 3):
                text = "pre " + needle[:cut] + "\n" * breaks + needle[cut:] + " post"
                assert any(m in text for m in marks), (needle, cut, breaks)
        assert not any(m in f"pre {needle} post\nnext line" for m in marks)
    assert (
        wrap_marks(["a\nb", "x"]) == ()
    )  # a needle with a break is in no flat text; one character never wraps


def test_a_needle_with_a_break_is_never_found_flat_in_the_text() -> None:
    pytest.importorskip("hyperscan")
    scan = Prefilter(Needles(("Timer ",), ("a\nb", "Error")), make_engine(HYPERSCAN)).scan("a\nb Error\n")
    assert scan.flat_at is not None and scan.found == {"Error": [3]}


# ---------------------------------------------------------------- line numbers


def test_line_numbers_primed_or_asked_in_any_order_are_str_count() -> None:
    rng = random.Random(7)
    for _ in range(200):
        text = "".join(rng.choice("ab\n") for _ in range(rng.randint(0, 200)))
        numbers = LineNumbers(text)
        runs = [sorted(rng.sample(range(len(text) + 1), rng.randint(0, min(8, len(text) + 1)))) for _ in "ab"]
        numbers.prime(*runs)
        assert numbers._at == sorted([0, *runs[0], *runs[1]])  # primed: every position answered at once
        for pos in rng.sample(range(len(text) + 1), min(20, len(text) + 1)):
            assert numbers.before(pos) == text.count("\n", 0, pos), (text, pos)
        numbers.prime([rng.randint(0, len(text))])  # after answers: merged one by one
        assert numbers.total == text.count("\n")


# ---------------------------------------------------------------- Timer lines

HEADS = [
    "(MegatronTrainRayActor pid=52001) ",
    "(MegatronTrainRayActor pid=52001, ip=10.0.0.7) ",
    "(pid=9) ",
    "(raylet, ip=10.0.0.2) ",
    "(my-actor pid=3) ",
    "\x1b[36m(TrainRayActor pid=1)\x1b[0m ",
    "^[[36m(TrainRayActor pid=1)^[[0m ",
    "",
]
BRACKETS = [
    "[2026-08-21 17:37:05.000 actor_cell0_rank3] ",
    "[2026-08-21 17:37:05,123456 actor_cell1_rank12] ",
    "[2026-08-21 17:37:05 TP4 EP4] ",
    "[2026-08-21 17:37:05 TP4] ",
    "[2026-08-21 17:37:05] ",
    "[2026-08-21T17:37:05.000 rollout_0] ",
    "[2026-08-21 17:37:05.000 _rank3] ",
    "[2026-08-21 17:37:05.000 actor_cell0_rank3\x1b[0m] ",  # a colour code parse_line strips: rank 3
    "[2026-08-21 17:37:05.000 actor_cell0_rank3^[[0m] ",
    "",
]
MESSAGES = [
    "timer.py:42 - Timer train start",
    "timer.py:42 - Timer update_weights end (elapsed: 12.7s)",
    "timer.py:42 - Timer a.b-c end (elapsed: 3 s)",
    "timer.py:42 - note Timer train start",
    "INFO timer.py:42: Timer train start",
    "timer.py:42 - Timer train end",
    "timer.py:42 - Timer train start [repeated 3x across cluster]",
    "timer.py:42 - Timer train start\r",
    "timer.py:42 - Timer train start (Timer x end (elapsed: 1s))",
    # Ray's fold right after the bracket: parse_line cuts it with the bracket's space (no stamp then)
    "[repeated 2x across cluster] (Ray deduplicates logs by default. Timer train start)",
]


def timer_lines() -> list[str]:
    return [head + bracket + message for head in HEADS for bracket in BRACKETS for message in MESSAGES]


def test_a_timer_line_reads_by_one_match_as_through_parse_line() -> None:
    matched = 0
    for line in timer_lines():
        assert timer_line(line) == _timer_line_parsed(line), line
        assert timer_stamp(line) == parse_line(line).ts, line
        matched += _TIMER_LINE.match(line) is not None
    assert matched >= 40  # the fast path ran (miles' shapes), not only the fallback
    line = "(MegatronTrainRayActor pid=5, ip=10.0.0.7) [2026-08-21 17:37:05.000 actor_cell0_rank3] t.py:1 - "
    assert _TIMER_LINE.match(line + "Timer train end (elapsed: 2.5s)") is not None
    assert timer_line(line + "Timer train end (elapsed: 2.5s)") == rank_phases.TimerLine(
        "train", False, "2.5", "2026-08-21 17:37:05.000", "10.0.0.7", 3
    )
    assert _TIMER_HEAD.match(line) is not None


# ---------------------------------------------------------------- train actors

PLAIN = re.compile("\n" + _TRAIN_PREFIX.format(known=""))


def test_the_alternation_matches_exactly_its_words() -> None:
    rng = random.Random(5)
    for _ in range(200):
        words = list(
            {"".join(rng.choice("12, ip=.") for _ in range(rng.randint(1, 6))) + ") " for _ in "abcdef"}
        )
        pattern = re.compile(alternation(words))
        assert all(pattern.fullmatch(w) for w in words)
        others = {w[:-3] + ") " for w in words} | {w[:-2] + "1) " for w in words} | {"9) "}
        assert not any(pattern.fullmatch(o) for o in others - set(words))


def reference_train(chunks: list[str]) -> dict[tuple[int, str], set[str]]:
    """The ledger's train actors as the plain regex (every line matched) finds them: each process with the
    labels it may have (which of a chunk's prefixes of one process names it is a set's order)."""
    train: dict[tuple[int, str], set[str]] = {}
    for text in chunks:
        for actor, pid, ip in PLAIN.findall("\n" + text):
            train.setdefault((int(pid), ip), set()).add(f"{actor} pid={pid}" + (f", ip={ip}" if ip else ""))
    return train


def test_train_actors_learnt_with_known_ones_refused_are_the_plain_regexs() -> None:
    rng = random.Random(11)
    prefixes = [
        "(MegatronTrainRayActor pid=52001) ",
        "(MegatronTrainRayActor pid=52001, ip=10.0.0.1) ",
        "(FSDPTrainRayActor pid=52001) ",
        "(MegatronTrainRayActor pid=5200) ",
        "(MegatronTrainRayActor pid=520011) ",
        "(MegatronTrainRayActor pid=052001) ",
        "(TrainRayActor pid=7, ip=10.0.0.1) ",
        "(TrainRayActor pid=7, ip=10.0.0.10) ",
        "(RolloutRayActor pid=8) ",
        "x (TrainRayActor pid=9) ",
    ]
    for _ in range(100):
        ledger = ShimLedger()
        chunks = []
        for _ in range(rng.randint(1, 6)):
            lines = [
                rng.choice(prefixes) + rng.choice(["step 1", "ultra-console shim: applied {}"])
                for _ in range(6)
            ]
            chunks.append("\n".join(lines) + "\n")
            ledger.note_lines(chunks[-1])
        want = reference_train(chunks)
        assert set(ledger.train) == set(want), chunks
        assert all(label in want[key] for key, label in ledger.train.items()), chunks
    ledger = ShimLedger()
    ledger.note_lines("(MegatronTrainRayActor pid=52001) a\n")
    ledger.note_lines("x\n(MegatronTrainRayActor pid=52001) b\n")
    assert ledger._new_lines.refused == ((52001, ""),)  # the fast path: the known process refused
    assert ledger._new_lines.found("x\n(MegatronTrainRayActor pid=52001) b\n", ledger.train) == set()
