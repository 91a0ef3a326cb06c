"""One ingest path: lines -> chunks -> store -> monitor, for the app, `metrics`, `logs` and the demo."""

from __future__ import annotations

import asyncio
import time

import pytest

from backend.errors import ConsoleError
from backend.signals.ingest import LogChunk, RunLog, text_chunks
from backend.signals.monitor import RunMonitor


async def _lines(
    items: list[str], *, pause_after: int | None = None, pause_s: float = 0.0, fail: Exception | None = None
):
    for i, item in enumerate(items):
        yield item
        if pause_after is not None and i + 1 == pause_after:
            await asyncio.sleep(pause_s)
    if fail is not None:
        raise fail


async def _collect(source, **kw) -> list[LogChunk]:
    return [chunk async for chunk in text_chunks(source, **kw)]


def test_history_chunks_by_count() -> None:
    chunks = asyncio.run(_collect(_lines([f"l{i}" for i in range(5)]), max_lines=2))
    assert [c.lines for c in chunks] == [2, 2, 1]
    assert "".join(c.text for c in chunks) == "".join(f"l{i}\n" for i in range(5))


def test_a_live_line_is_not_held_back_waiting_for_the_next() -> None:
    """The tail goes quiet after one line: that line still arrives within the flush time."""

    async def run() -> tuple[LogChunk, float]:
        t0 = time.monotonic()
        async for chunk in text_chunks(_lines(["alone", "later"], pause_after=1, pause_s=2.0), flush_s=0.05):
            return chunk, time.monotonic() - t0
        raise AssertionError("no chunk")

    chunk, waited = asyncio.run(run())
    assert chunk == LogChunk("alone\n", 1) and waited < 1.0


def test_a_tail_error_comes_after_the_lines_before_it() -> None:
    async def run() -> list[str]:
        seen: list[str] = []
        with pytest.raises(ConsoleError, match="tail lost"):
            async for chunk in text_chunks(_lines(["a", "b"], fail=ConsoleError("tail lost")), flush_s=0.05):
                seen.append(chunk.text)
        return seen

    assert "".join(asyncio.run(run())) == "a\nb\n"


def test_run_log_feeds_store_and_monitor(tmp_path) -> None:
    monitor = RunMonitor(rules=[])
    run_log = RunLog.open(tmp_path, "job", monitor)
    lines = [
        "(MegatronTrainRayActor pid=1) [2026-03-02 10:00:05] log_utils.py:443 - step 0: {'train/loss': 0.5}",
        "noise",
    ]

    async def feed() -> None:
        async for chunk in text_chunks(_lines(lines)):
            await run_log.add_async(chunk)

    asyncio.run(feed())
    assert run_log.lines_in == 2 and len(run_log.store) == 2
    assert monitor.collector.series.snapshot().by_key["train/loss"].points() == ((0, 0.5),)
    run_log.close()


def test_a_saved_file_reads_through_a_scratch_spool(tmp_path) -> None:
    path = tmp_path / "job.log"
    path.write_bytes(b"step 3: {'train/loss': 0.25}\r\nno newline at the end")
    monitor = RunMonitor(rules=[])
    with RunLog.scratch(monitor) as run_log:
        assert run_log.add_file(path) == 2
        spool = run_log.store.path
    assert not spool.exists()
    assert monitor.collector.series.snapshot().by_key["train/loss"].points() == ((3, 0.25),)
    with pytest.raises(ConsoleError, match="no such log file"), RunLog.scratch(monitor) as run_log:
        run_log.add_file(tmp_path / "missing.log")
