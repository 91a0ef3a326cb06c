"""The two log scan engines (backend.signals.scan_engine) give the same results: the same positions as
repeated str.find, the same lines to each of the monitor's readers, and the same series, alerts and
failures on every log fixture under tests/data and every failure shape; and the reader registry refuses a
reader that waits for no needle (it would never see a line)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import failure_shapes
import pytest
from every_start import every_start

from backend.demo.sample_log import SampleRun, generate
from backend.sanitize import sanitize_text
from backend.signals.monitor import RunMonitor
from backend.signals.readers import ChunkReader, LineReader, Reader, Readers, TextReader
from backend.signals.scan_engine import HYPERSCAN, PURE, Engine, engine_name, make_engine

pytest.importorskip("hyperscan")  # the `test` extra carries it: CI compares the engines

DATA = Path(__file__).resolve().parents[1] / "data"
NOW = 1_790_000_000.0
FIXTURES = sorted(DATA.rglob("*.log"))


def engines() -> dict[str, Engine]:
    return {PURE: make_engine(PURE), HYPERSCAN: make_engine(HYPERSCAN)}


def test_both_engines_find_every_occurrence_as_str_find_does_ascii_or_not() -> None:
    rng = random.Random(33)
    needles = ["aa", "Error", "é:", "█▌", "[rank", ": {", "a"]
    alphabet = "aa Error é:█▌[rank: {\n\t"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        want = {n: s for n in needles if (s := every_start(text, n))}
        for name, engine in engines().items():
            assert engine.finder(needles, text[:100]).find(text) == want, (name, text)


def monitor(engine: Engine) -> tuple[RunMonitor, dict[str, list[str]]]:
    """A monitor on `engine` whose readers each record what they were handed."""
    m = RunMonitor(clock=lambda: NOW, engine=engine)
    handed: dict[str, list[str]] = {}

    def recording(reader: Reader) -> Reader:
        def read(*args: object) -> None:
            whole = isinstance(reader, LineReader | TextReader)
            handed.setdefault(reader.name, []).append(str(args[0]) if whole else "")
            reader.read(*args)  # type: ignore[arg-type]

        return dataclasses.replace(reader, read=read)  # type: ignore[arg-type]

    m.readers.readers = [recording(r) for r in m.readers.readers]
    return m, handed


def observed(m: RunMonitor) -> str:
    m.input_ended()
    m.tick(now=NOW, dashboard_now=NOW)
    return json.dumps(
        {
            "snapshot": m.snapshot(now=NOW),
            "alerts": [dict(a.to_json(), cause=a.cause, advice=a.advice) for a in m.alerts.alerts],
            "failures": [repr(e) for e in m.alerts.failures.events],
            "phases": repr(m.metrics_snapshot(now=NOW).phases),
            "process_ranks": sorted(m.process_ranks.items()),
            "facts": repr(m.facts),
        },
        sort_keys=True,
        default=str,
    )


def same_on_both(chunks: list[str]) -> str:
    """Feed both engines' monitors the same chunks; everything they saw and say is the same."""
    (pure, pure_got), (fast, fast_got) = monitor(make_engine(PURE)), monitor(make_engine(HYPERSCAN))
    for chunk in chunks:
        pure.feed_text(chunk)
        fast.feed_text(chunk)
    assert pure_got == fast_got  # the lines delivered to each reader
    seen = observed(pure)
    assert seen == observed(fast)
    unfiltered = RunMonitor(clock=lambda: NOW, prefilter=False)  # every reader searching for itself
    for chunk in chunks:
        unfiltered.feed_text(chunk)
    assert observed(unfiltered) == seen
    return seen


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_both_engines_read_every_log_fixture_the_same(path: Path) -> None:
    text = sanitize_text(path.read_text(encoding="utf-8", errors="replace"))
    lines = text.splitlines(keepends=True)
    chunks = ["".join(lines[i : i + 40]) for i in range(0, len(lines), 40)]
    seen = same_on_both(chunks)
    assert '"failures": []' not in seen  # each fixture is a failed run: something was found


def test_both_engines_read_every_failure_shape_the_same() -> None:
    found = 0
    for scenario, printed in failure_shapes.cases():
        seen = same_on_both([sanitize_text(failure_shapes.render(scenario, printed))])
        found += '"failures": []' not in seen
        if (
            scenario.expect is not None and scenario.expect.id == "stall"
        ):  # found from the Timer lines the scan points to
            assert "stood still" in seen, scenario.name
    assert found >= len(failure_shapes.cases()) // 2


def test_both_engines_read_a_real_shaped_log_with_non_ascii_chunks_the_same() -> None:
    """tqdm bars (block characters) on most lines, as real rollout logs hold them: the hyperscan engine
    maps its byte offsets back to characters."""
    lines = list(generate(SampleRun(rollouts=4, noise_per_rollout=120, save_every=2, eval_every=2)))
    bar = "Rollout generation:  42%|████▎     | 27/64 [00:13<00:18,  2.0it/s]"
    mixed = [line if i % 3 else f"{line} {bar}" for i, line in enumerate(lines)]
    text = sanitize_text("\n".join(mixed) + "\n")
    seen = same_on_both([text[i : text.find("\n", i + 5000) + 1] for i in range(0, len(text), 5000)][:-1])
    assert '"series": {}' not in seen


def test_a_reader_without_a_needle_is_refused() -> None:
    with pytest.raises(TypeError, match="needs at least one needle"):
        LineReader("nothing", (), print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs at least one needle"):
        ChunkReader("nothing", (), (), lambda text, scan: None)
    with pytest.raises(TypeError, match="needs at least one needle"):
        LineReader("empty", ("",), print)
    with pytest.raises(TypeError, match="needs at least one needle"):
        TextReader("nothing", (), print)  # type: ignore[arg-type]


def test_every_reader_of_the_monitor_has_needles_the_scan_looks_for() -> None:
    m = RunMonitor()
    assert m.readers.readers and m.prefilter is not None
    looked_for = set(m.prefilter.needles.lines) | set(m.prefilter.needles.present)
    for reader in m.readers.readers:
        assert reader.needles or getattr(reader, "flat", ()), reader.name
        assert set(reader.needles) <= looked_for, reader.name
        if isinstance(reader, ChunkReader):
            assert set(reader.flat) <= set(m.prefilter.needles.flat), reader.name


@pytest.mark.parametrize("engine", [PURE, HYPERSCAN])
@pytest.mark.parametrize("bar", ["", " █▎", " \U0001f600"])  # ASCII, UTF-16 and UTF-32 layouts
def test_a_text_reader_gets_the_whole_chunk_only_where_its_needle_is(engine: str, bar: str) -> None:
    from backend.signals.prefilter import Prefilter

    got: list[str] = []
    readers = Readers(
        [TextReader("train", ("TrainRayActor",), got.append), LineReader("t", ("Timer ",), print)]
    )
    prefilter = Prefilter(readers.needles(), make_engine(engine))
    # a misaligned UTF-16 match first (U+5400 U+7200 ...: the needle's bytes across two characters)
    odd = "".join(chr(ord(c) << 8) for c in "TrainRayActor") + "\u0100" if bar == " █▎" else ""
    hit = f"noise{bar}{odd}\n(MegatronTrainRayActor pid=1) a TrainRayActor twice\n"
    for text in (hit, f"nothing here{bar}\n", hit):
        scan = prefilter.scan(text)
        assert "TrainRayActor" not in scan.at  # presence only: no starts to cut lines from
        readers.feed(text, scan)
    assert got == [hit, hit]


def test_a_line_reader_gets_exactly_the_lines_holding_its_needles() -> None:
    got: list[str] = []
    readers = Readers([LineReader("timer", ("Timer ",), got.append)])
    from backend.signals.prefilter import Prefilter

    text = "noise\nTimer a start\nstep 1: {}\nx Timer b end\n"
    readers.feed(text, Prefilter(readers.needles()).scan(text))
    readers.feed("nothing here\n", Prefilter(readers.needles()).scan("nothing here\n"))
    assert got == ["Timer a start\nx Timer b end\n"]  # and never called for a chunk without one


def test_the_engine_is_chosen_once_and_said(scan_engine: str) -> None:
    assert engine_name() == scan_engine
    assert RunMonitor().prefilter.engine.name == scan_engine  # type: ignore[union-attr]


def test_version_names_the_scan_engine(scan_engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    from console.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert f"log scan engine: {scan_engine}" in capsys.readouterr().out


def test_a_forced_engine_that_cannot_run_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from backend.signals import scan_engine
    from console.cli import main

    monkeypatch.setenv(scan_engine.ENGINE_ENV, "grep")
    scan_engine.default_engine.cache_clear()
    try:
        assert main(["plan", "--json"]) == 1
    finally:
        scan_engine.default_engine.cache_clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ULTRA_CONSOLE_SCAN_ENGINE=grep: not an engine" in err


def test_the_pure_engine_finds_a_presence_needle_once_and_the_others_in_full() -> None:
    """On the pure engine a presence needle is one `str.find` (its first start), never its every start."""
    from backend.signals.scan_engine import finder_of

    text = "a TrainRayActor b TrainRayActor Timer c Timer\n" * 50
    finder = finder_of(make_engine(PURE), ("Timer",), ("TrainRayActor",), text[:1000])
    found = finder.find(text)
    assert found["TrainRayActor"] == [text.find("TrainRayActor")]
    assert found["Timer"] == every_start(text, "Timer")
    assert "TrainRayActor" not in finder.find("Timer only\n")
