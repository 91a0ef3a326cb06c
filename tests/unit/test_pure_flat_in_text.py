"""The pure engine finds the flat needles (the failure catalog's hints) in the text itself with the line
needles, in one plan, and checks only the line breaks a hint may span (backend.signals.prefilter's
`_FlatInPlan`): what a scan returns is the brute-force reference's on any text, hints wrapped across one
or more breaks and empty lines included, by each of its three ways (no break to check, a few checked one
by one, too many: the copy without breaks searched as before)."""

from __future__ import annotations

import random

from every_start import every_start
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.signals import prefilter as pf
from backend.signals.prefilter import Needles, Prefilter, Scan
from backend.signals.scan_engine import PURE, make_engine

# hints that hold each other ("Error" in "RayActorError"), repeat themselves, share their characters
# with the line needles, a wide character, one that is a single character, one with a break
FLAT = ("Error", "RayActorError", "aXa", "x", "[rank", "CUDA out of memory", "é█", "a\nb", "ab ab")
LINES = ("Timer ", ": {", "--", "ab")
PRESENT = ("TrainRayActor", "Error")
NEEDLES = Needles(LINES, FLAT, PRESENT)
PIECES = [*FLAT, *LINES, *PRESENT, "\n", "\n", "\n\n", "a", "b", " ", "X", "r", "E", "█", "noise line "]


def reference(scan: Scan, text: str, needles: Needles = NEEDLES) -> None:
    """The scan against every_start on the text and on its copy without breaks."""
    flat = text.replace("\n", "")
    assert scan.at == {n: s for n in needles.lines if (s := every_start(text, n))}
    assert scan.found == {n: s for n in needles.flat if (s := every_start(flat, n))}
    for n in (*needles.lines, *needles.flat, *needles.present):
        assert scan.has(n) == (n in (flat if n in needles.flat else text)), n
    for n in needles.flat:
        kept: list[int] = []
        for start in every_start(flat, n):
            if not kept or start >= kept[-1] + len(n):
                kept.append(start)
        assert scan.positions(n) == kept
    lines = text.split("\n")[: -1 if text.endswith("\n") else None]
    want = [line for line in lines if any(n in line for n in needles.lines)]
    assert scan.lines == ("\n".join(want) + "\n" if want else "")


def wrapped(needle: str, cuts: list[int], breaks: list[int]) -> str:
    """The needle with runs of breaks (one or more: empty lines) at these cuts."""
    out, last = [], 0
    for cut, run in sorted(zip(cuts, breaks, strict=False)):
        cut = min(max(cut, last), len(needle))
        out += [needle[last:cut], "\n" * run]
        last = cut
    return "".join(out) + needle[last:]


texts = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        st.builds(
            wrapped,
            st.sampled_from(FLAT),
            st.lists(st.integers(1, 20), min_size=1, max_size=3),
            st.lists(st.integers(1, 3), min_size=1, max_size=3),
        ),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts, texts)
def test_a_scan_is_the_reference_on_any_text_wrapped_or_not(text: str, sample: str) -> None:
    prefilter = Prefilter(NEEDLES, make_engine(PURE))
    prefilter.scan(sample)  # a plan learnt from another text
    reference(prefilter.scan(text), text)


def test_each_way_of_the_break_check_is_taken_and_is_the_reference() -> None:
    """No break to check (found in the text only), a few checked one by one, or many (the copy)."""
    rng = random.Random(33)
    prefilter = Prefilter(NEEDLES, make_engine(PURE))
    ways = {"text": 0, "spans": 0, "copy": 0}
    for size in [5] * 300 + [2000] * 20:
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, size)))
        if rng.random() < 0.5:
            needle = rng.choice(FLAT)
            text += wrapped(needle, [rng.randint(1, len(needle))], [rng.randint(1, 3)])
        if size > 100:  # many breaks a hint may span: 'E' then a break, over and over
            text += "E\nrr\n" * (pf.MAX_SPANS + len(text) // 1000)
        flat_at, breaks = prefilter._in_plan.split(text, prefilter._finder.find(text))  # type: ignore[union-attr]
        ways["copy" if flat_at is None else "spans" if breaks else "text"] += 1
        reference(prefilter.scan(text), text)
    assert min(ways.values()) > 5, ways


def test_a_hint_cut_after_each_of_its_characters_by_breaks_is_found_at_its_flat_start() -> None:
    prefilter = Prefilter(NEEDLES, make_engine(PURE))
    for needle in FLAT:
        for cut in range(1, len(needle)):
            for run in (1, 2, 3):
                text = f"(Actor pid=1) noise {needle[:cut]}{chr(10) * run}{needle[cut:]} tail\nnext line\n"
                reference(prefilter.scan(text), text)
