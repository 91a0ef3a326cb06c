"""The monitor's prefilter (backend.signals.prefilter) loses nothing: every alert rule's and failure kind's
example passes it (the rules and the catalog are iterated, so a new one is covered), and a long mixed log
gives the same series, alerts, derived signals and diagnosis with and without it."""

from __future__ import annotations

import itertools
import json
import random

import failure_shapes
import miles_log_shapes
import pytest
from miles_log_shapes import HEALTH_NOISE, Shape

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.alerts import METRIC_CHECKS, AlertRule, load_rules
from backend.signals.failures import FailureScanner
from backend.signals.failures.catalog import EXCEPTION_HINTS, FailureKind, default_catalog
from backend.signals.monitor import RunMonitor
from backend.signals.prefilter import Needles, Prefilter
from backend.signals.pure_scan import Plan
from shim import logline

pytestmark = pytest.mark.usefixtures("scan_engine")  # every scan-level test on both engines
RULES = load_rules()
CATALOG = default_catalog()
NOW = 1_790_000_000.0


def monitor(prefilter: bool = True) -> RunMonitor:
    return RunMonitor(prefilter=prefilter, clock=lambda: NOW)


def monitor_needles() -> Needles:
    return RunMonitor().prefilter.needles  # type: ignore[union-attr]


def prefilter() -> Prefilter:
    return Prefilter(monitor_needles())


# ---------------------------------------------------------------- every rule's and kind's example


LINE_KINDS = [k for k in CATALOG.kinds if not k.derived]  # a stall is made from phases, not one line


@pytest.mark.parametrize("kind", LINE_KINDS, ids=[k.id for k in LINE_KINDS])
def test_every_failure_kinds_example_passes_and_is_found_the_same(kind: FailureKind) -> None:
    assert kind.examples, f"failure kind {kind.id} has no example line"
    # the generic kind is an exception line that ends a traceback (as test_failures feeds it)
    context = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\n' if kind.generic else ""
    for example in kind.examples:
        text = context + example + "\n"
        scan = prefilter().scan(text)
        hints = EXCEPTION_HINTS if kind.generic else kind.hints
        assert any(scan.positions(h) for h in hints), example
        with_scan, without = FailureScanner(CATALOG), FailureScanner(CATALOG)
        found = with_scan.feed(text, scan)
        assert kind.id in {e.kind for e in found}, example
        assert found == without.feed(text)
        m = monitor()
        m.feed_text(text)
        assert kind.id in [a.id for a in m.alerts.alerts], example


@pytest.mark.parametrize("rule", [r for r in RULES if r.when == "log"], ids=lambda r: r.id)
def test_every_log_rules_example_passes_and_fires(rule: AlertRule) -> None:
    examples = rule.words.get("examples", ())
    assert examples, f"log rule {rule.id} has no examples in configs/alerts.toml"
    for example in examples:
        assert prefilter().scan(example + "\n").lines == example + "\n"
        m = monitor()
        m.feed_text(example + "\n")
        assert rule.id in [a.id for a in m.alerts.alerts], example


@pytest.mark.parametrize("rule", [r for r in RULES if r.when in METRIC_CHECKS], ids=lambda r: r.id)
def test_every_metric_rules_keys_reach_their_series_in_every_line_shape(rule: AlertRule) -> None:
    for key, fmt in itertools.product(rule.metrics, ("2026-04", "newest", "bare")):
        line = next(
            ln
            for ln in miles_log_shapes.lines(Shape(format=fmt, rollouts=1, noise=False))
            if "step 0: " in ln
        ).replace("'train/loss'", f"'{key}'")
        text = sanitize_text(line) + "\n"
        assert prefilter().scan(text).lines == text
        m = monitor()
        m.feed_text(text)
        assert m.collector.series.get(key) is not None, (key, fmt)


def test_the_shims_lines_pass() -> None:
    for line in (
        logline.applied({"moe_router_topk_scaling_factor": 1.0}),
        logline.applied({"moe_router_topk_scaling_factor": 5.0}, mapping_only=True),
        logline.not_applied("ImportError: megatron.bridge"),
    ):
        text = f"(MegatronTrainRayActor pid=7) {line}\n"
        assert prefilter().scan(text).lines == text


def test_a_hint_a_terminal_wrapped_in_two_is_still_found() -> None:
    hint = "Watchdog caught collective operation timeout"
    text = "x" * 70 + hint[:20] + "\n" + hint[20:] + " rest\n"
    scan = prefilter().scan(text)
    assert scan.positions(hint) == [70]


def test_positions_are_those_repeated_find_gives() -> None:
    pf = Prefilter(Needles(lines=(), flat=("aa", "Error")))
    scan = pf.scan("aaaa\naaXError Error\n")
    assert scan.positions("aa") == [0, 2, 4]
    assert scan.positions("Error") == [7, 13]


def test_lines_are_in_order_and_once() -> None:
    pf = Prefilter(Needles(lines=(": {", "Timer "), flat=()))
    text = "noise\nTimer a start: {x}\nnoise\nstep 1: {}\n"
    assert pf.scan(text).lines == "Timer a start: {x}\nstep 1: {}\n"
    assert pf.scan("noise only\n").lines == ""


# ---------------------------------------------------------------- a long mixed log


def mixed_log(min_lines: int) -> list[str]:
    """Real shapes (every miles metric shape, every failure scenario as logs print it, the sample run's
    noise and Timer/checkpoint lines, health checks), shuffled in blocks, cut into uneven chunks later."""
    blocks: list[list[str]] = []
    for fmt, colour, repeat, ip in itertools.product(
        ("2026-04", "newest", "bare"), ("", "esc", "caret"), (False, True), (None, "10.0.0.9")
    ):
        shape = Shape(format=fmt, rollouts=4, colour=colour, repeat_on_metrics=repeat, ip=ip)
        blocks.append(miles_log_shapes.text(shape).splitlines())
    for scenario, printed in failure_shapes.cases():
        blocks.append(failure_shapes.render(scenario, printed).splitlines())
    blocks.append(
        list(
            generate(SampleRun(rollouts=3, noise_per_rollout=5, save_every=1, shim_failure="ImportError: x"))
        )
    )
    blocks.append(  # a rank named by no `_cell` bracket, torch's rank tag on a line naming no failure
        [
            (
                "(MegatronTrainRayActor pid=61) [2026-08-21 "
                "10:00:05.000 trainer_rank2] timer.py:30 - Timer x start"
            ),
            "(MegatronTrainRayActor pid=61) [2026-08-21 10:00:09.000 trainer_rank2] timer.py:42 - Timer x end"
            " (elapsed: 4.0s)",
            "[rank5]:[W1201 10:00:05.123 ProcessGroupNCCL.cpp:1000] a warning about nothing",
        ]
    )
    rng = random.Random(21)
    out: list[str] = []
    noise = list(generate(SampleRun(rollouts=4, noise_per_rollout=400, save_every=3, eval_every=2)))
    while len(out) < min_lines:
        for block in rng.sample(blocks, len(blocks)):
            out.extend(noise)
            out.extend(rng.choice(HEALTH_NOISE) for _ in range(rng.randrange(50, 500)))
            out.extend(block)
    return out


def observed(m: RunMonitor) -> str:
    """Everything the monitor shows, as one comparable string."""
    m.input_ended()
    m.tick(now=NOW, dashboard_now=NOW)
    snap = m.snapshot(now=NOW)
    cause = m.diagnosis()
    return json.dumps(
        {
            "snapshot": snap,
            "alerts": [dict(a.to_json(), cause=a.cause, advice=a.advice) for a in m.alerts.alerts],
            "cause": cause.to_json() if cause is not None else None,
            "failures": [repr(e) for e in m.alerts.failures.events],
            "ranks_seen": sorted(m.alerts.failures.ranks_seen),
            "phases": repr(m.metrics_snapshot(now=NOW).phases),
            "process_ranks": sorted(m.process_ranks.items()),
            "facts": repr(m.facts),
            "shim": repr((m.alerts.shim.train, m.alerts.shim.reports, m.alerts.shim_reports)),
            "records": m.collector.records,
            "problems": [str(p) for p in m.collector.problems],
        },
        sort_keys=True,
        default=str,
    )


def fingerprint(m: RunMonitor) -> tuple[object, ...]:
    """A cheap summary of the monitor's state, compared after every chunk."""
    return (
        [(a.id, a.count, a.cause) for a in m.alerts.alerts],
        sorted(m.alerts.failures.ranks_seen),
        m.alerts.failures.started,
        m.alerts.failures.succeeded,
        dict(m.collector.records),
        m.collector.problem_count,
        len(m.process_ranks),
        repr(m.facts),
        m.telemetry.ranks.last_change,
        len(m.telemetry.ranks.lanes),
        (m.alerts.shim.version, len(m.alerts.shim.train)),
    )


@pytest.mark.slow  # over 20 s alone: the full suite runs it, --fast does not
def test_a_long_mixed_log_reads_the_same_with_and_without_the_prefilter() -> None:
    lines = mixed_log(100_000)
    rng = random.Random(7)
    fast, slow = monitor(True), monitor(False)
    i = 0
    while i < len(lines):
        n = rng.choice((1, 3, 37, 500, 4000, 20000))
        chunk = sanitize_text("\n".join(lines[i : i + n]) + "\n")
        fast.feed_text(chunk)
        slow.feed_text(chunk)
        assert fingerprint(fast) == fingerprint(slow), i
        i += n
    assert len(lines) >= 100_000
    seen = observed(fast)
    assert seen == observed(slow)
    # the log holds what the comparison is about: series, metric and log alerts, failures, phases, ranks
    assert len(fast.collector.series.keys()) > 20
    assert {"shim-not-loaded", "cuda-oom", "nccl-timeout"} <= {a.id for a in fast.alerts.alerts}
    assert fast.diagnosis() is not None and fast.process_ranks and fast.facts.checkpoints


def test_what_is_found_does_not_depend_on_what_the_log_taught_it() -> None:
    """How a needle is searched (by a rare character, or
    whole) is learnt from the log; what is found is not."""
    needles = monitor_needles()
    examples = [e for kind in CATALOG.kinds for e in kind.examples]
    text = "\n".join(mixed_log(1)[:3000] + examples) + "\n"
    fresh = Prefilter(needles).scan(text)
    taught = Prefilter(needles)
    taught.scan(("Error: memory ':{ _cell Timer -- .... [rank\n" * 4000)[: 1 << 17])  # every char common
    for scan in (taught.scan(text), Prefilter(needles).scan("x\n") and Prefilter(needles).scan(text)):
        assert (scan.found, scan.lines, scan.has(": {")) == (fresh.found, fresh.lines, fresh.has(": {"))
    assert fresh.found and fresh.lines


def test_a_character_is_searched_alone_where_that_costs_less_than_its_needles_passes() -> None:
    """'m' at 2000 per MB: one needle on it is cheaper as a pass of its own; three share its steps (the old
    rule, a fixed 1000 per MB, searched neither through it)."""
    sample = ("m" + "a" * 499) * 20  # 10 000 characters, 'm' 2000 times per MB, 'T', 'n', 'u' never
    alone = Plan.for_sample(["amaa"], sample)
    assert alone.by_char == {} and "amaa" in str(alone.by_anchor)
    shared = Plan.for_sample(["ama", "amaa", "aama"], sample)
    assert sorted(needle for needle, _ in shared.by_char["m"]) == ["aama", "ama", "amaa"]
    assert shared.by_anchor == {}
    text = "xx amaa aama ama"
    assert shared.find(text) == alone.find(text) | Plan.for_sample(["ama", "aama"], "").find(text)


def test_a_piece_searched_by_a_regex_is_found_where_str_find_finds_it() -> None:
    """Short pieces go through a regex (faster than str.find for them), from any of their characters: the
    same positions, every occurrence, regex metacharacters taken literally."""
    from backend.signals.pure_scan import _occurrences, _searched

    rng = random.Random(3)
    for _ in range(300):
        text = "".join(rng.choice("-.*[( a\n") for _ in range(rng.randint(0, 40)))
        for piece in ("--", ".*", "[(", "a-", " ....", "-"):
            for rare in range(len(piece)):
                assert _searched(text, piece, rare) == _occurrences(text, piece), (text, piece, rare)


def every_start(text: str, needles: list[str]) -> dict[str, list[int]]:
    """The reference: each needle -> every start, by trying each offset."""
    found = {n: [i for i in range(len(text)) if text.startswith(n, i)] for n in needles if n}
    return {n: starts for n, starts in found.items() if starts}


# Needles that overlap each other and themselves, prefixes of others, single characters, wide characters
# (two-byte and past U+FFFF), '?' (what a wide character is in the pair views), NUL.
PLAN_ALPHABET = "abab?-. \n\0é█▌𝄞xyz"


def random_needles(rng: random.Random) -> list[str]:
    needles = [
        "".join(rng.choice(PLAN_ALPHABET) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 9))
    ]
    return needles + [n[: rng.randint(1, len(n))] for n in needles[:2]]  # prefixes of others


def test_a_plan_finds_what_trying_every_offset_finds_whatever_its_sample() -> None:
    """Every way of a plan (a character, a dispatched group, a pair in the views, an anchor by str.find
    or by a regex from its rarest character) against the brute-force reference, on samples that teach
    each: the text itself, none, another text, one where every character is common."""
    rng = random.Random(33)
    common = ("abab xyz-. " * 400)[:4000]
    for _ in range(1500):
        needles = random_needles(rng)
        text = "".join(rng.choice(PLAN_ALPHABET) for _ in range(rng.randint(0, 300)))
        other = "".join(rng.choice(PLAN_ALPHABET) for _ in range(400))
        for sample in (text, "", other, common):
            assert Plan.for_sample(needles, sample).find(text) == every_start(text, needles), (needles, text)


def test_each_way_of_a_plan_is_taken_and_finds_every_start() -> None:
    """The sample decides: a needle whose characters are all common goes by a rare pair (the views), six
    needles on one rare character by a lookup of its neighbours, a short needle of common characters by a
    regex from its rarest one; what they find is the reference's, in ASCII text and in wider text."""
    sample = ("ab cd-ef.gh ijz" * 13 + "Q") * 300  # 'Q' at 5000 per MB: too many finds to check from Python
    needles = ["Q-a", "Q.b", "Qcz", "Q d", "Mab", "aMb", "abM", "cdM ", "M", "Mx", "dM", "ba dc", "fe.hg"]
    plan = Plan.for_sample(needles, sample)
    assert plan.by_pair and plan.regex
    assert any(len(placed) >= 6 for placed in plan.by_char.values())
    rng = random.Random(5)
    for _ in range(200):
        pieces = ["ab", " cd", "M", "ba dc", "fe.hg", "Q", "-a", ".b", "cz", " d", "█", "\n", "x"]
        text = "".join(rng.choice(pieces) for _ in range(200))
        assert plan.find(text) == every_start(text, needles)
