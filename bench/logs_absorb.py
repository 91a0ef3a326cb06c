"""Log lines per second the logs view absorbs while keys stay responsive (target >= 100k lines/s).

Headless app (App.run_test, 160x50) with the logs view showing and following. A feeder appends
batches of miles-shaped lines to the real LogStore and posts LogAppended, as the log worker does,
yielding to the event loop between batches; meanwhile a key (`k`, cursor up, then `G` to follow
again) is posted every 50 ms as the terminal driver would, and the time until it has taken effect
is recorded. Baseline in the same run: LogStore.append
alone on the same lines (no app), so the ratio shows what the view costs on top of the store.

Two runs: back to back (the most the view absorbs), then paced at the log worker's 10 Hz flush
with 10k-line batches (100k lines/s) while keys are timed.

Usage: .venv/bin/python bench/logs_absorb.py [--lines 1000000] [--batch 10000] [--paced-seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual import events  # noqa: E402

from backend.settings import Settings  # noqa: E402
from backend.signals.store import LogStore  # noqa: E402
from console.app import UltraConsoleApp  # noqa: E402
from console.messages import LogAppended  # noqa: E402
from console.views.logs import LogsView  # noqa: E402


def make_batches(total: int, batch: int) -> list[str]:
    lines = [
        f"(MegatronTrainRayActor pid={52000 + i % 8}, ip=10.0.0.{i % 16}) [2026-01-01 12:00:00.000 "
        f"actor_cell0_rank{i % 8}] model.py:9 - iteration {i} loss 0.{i % 997:03d} grad_norm 1.{i % 89:02d}"
        for i in range(batch)
    ]
    text = "\n".join(lines) + "\n"
    return [text] * (total // batch)


def store_only(batches: list[str], batch: int) -> float:
    st = LogStore(tempfile.mkdtemp(prefix="uc-absorb-"), "base")
    t = time.perf_counter()
    for text in batches:
        st.append(text)
    elapsed = time.perf_counter() - t
    st.close()
    return len(batches) * batch / elapsed


async def with_view(batches: list[str], batch: int, hz: float | None) -> tuple[float, list[float]]:
    """Feed back to back (hz=None: the most the view absorbs) or one batch every 1/hz s (the log
    worker flushes at 10 Hz); returns (lines/s, key latencies)."""
    state = Path(tempfile.mkdtemp(prefix="uc-absorb-"))
    app = UltraConsoleApp(
        Settings(state_dir=state), start_workers=False, watchdog=False, preview_run_id="260101-120000-000"
    )
    latencies: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        view = app.query_one(LogsView)
        st = LogStore(state / "spool", "view")
        view.set_store(st)
        await pilot.pause()
        done = asyncio.Event()

        async def feed() -> None:
            start = time.perf_counter()
            for i, text in enumerate(batches):
                st.append(text)
                app.post_message(LogAppended(len(st)))
                if hz is None:
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(max(0.0, start + (i + 1) / hz - time.perf_counter()))
            done.set()

        async def keys() -> None:
            """Post keys as the terminal driver does; latency = until `k` has taken effect (it moves the
            cursor up, which pauses follow); then `G` follows again."""
            lines = view.lines
            while not done.is_set():
                t = time.perf_counter()
                app.post_message(events.Key("k", "k"))
                while lines.follow and not done.is_set():
                    await asyncio.sleep(0.0005)
                latencies.append(time.perf_counter() - t)
                app.post_message(events.Key("G", "G"))
                while not lines.follow and not done.is_set():
                    await asyncio.sleep(0.0005)
                await asyncio.sleep(0.05)

        t = time.perf_counter()
        await asyncio.gather(feed(), keys())
        await pilot.pause()
        elapsed = time.perf_counter() - t
        assert view.lines.count == len(batches) * batch, view.lines.count
        st.close()
    return len(batches) * batch / elapsed, latencies


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--paced-seconds", type=float, default=5.0)
    args = ap.parse_args()
    batches = make_batches(args.lines, args.batch)
    base = store_only(batches, args.batch)
    rate, _ = asyncio.run(with_view(batches, args.batch, None))
    paced = batches[: max(1, int(args.paced_seconds * 10))]
    paced_rate, lat = asyncio.run(with_view(paced, args.batch, 10.0))
    lat_ms = sorted(x * 1000 for x in lat)
    p95 = lat_ms[max(0, int(len(lat_ms) * 0.95) - 1)] if lat_ms else float("nan")
    print(f"lines in batches of {args.batch:,} (160x50, logs view following):")
    print(f"  LogStore.append alone                  {base / 1000:8.0f}k lines/s")
    print(
        f"  absorbed by the view, back to back     {rate / 1000:8.0f}k lines/s  ({rate / base:.2f}x the "
        f"store alone)  target >= 100k: {'OK' if rate >= 100_000 else 'UNDER'}  ({args.lines:,} lines)"
    )
    print(
        f"  paced at 10 Hz (the log worker's flush) {paced_rate / 1000:7.0f}k lines/s for "
        f"{args.paced_seconds:.0f} s: key latency median {statistics.median(lat_ms):.1f} ms, p95 {p95:.1f} "
        f"ms, max {lat_ms[-1]:.1f} ms ({len(lat_ms)} presses)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
