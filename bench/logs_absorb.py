"""Log lines per second the logs view absorbs while keys stay responsive (target >= 100k lines/s).

Headless app (App.run_test, 160x50) with the logs view showing and following. A feeder appends
batches of miles-shaped lines to the real LogStore and posts LogAppended, as the log worker does,
yielding to the event loop between batches; meanwhile a key (`k`, cursor up, then `G` to follow
again) is pressed every 50 ms and its latency recorded. Baseline in the same run: LogStore.append
alone on the same lines (no app), so the ratio shows what the view costs on top of the store.

Usage: .venv/bin/python bench/logs_absorb.py [--lines 1000000] [--batch 10000]
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from backend.logs import LogStore  # noqa: E402
from backend.settings import Settings  # noqa: E402
from console.app import UltraConsoleApp  # noqa: E402
from console.messages import LogAppended  # noqa: E402
from console.views.logs import LogsView  # noqa: E402


def make_batches(total: int, batch: int) -> list[str]:
    lines = [f"(MegatronTrainRayActor pid={52000 + i % 8}, ip=10.0.0.{i % 16}) [2026-01-01 12:00:00.000 "
             f"actor_cell0_rank{i % 8}] model.py:9 - iteration {i} loss 0.{i % 997:03d} grad_norm 1.{i % 89:02d}"
             for i in range(batch)]
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


async def with_view(batches: list[str], batch: int) -> tuple[float, list[float]]:
    state = Path(tempfile.mkdtemp(prefix="uc-absorb-"))
    app = UltraConsoleApp(Settings(state_dir=state), start_workers=False, watchdog=False,
                          preview_run_id="260101-120000-000")
    latencies: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        view = app.query_one(LogsView)
        st = LogStore(state / "spool", "view")
        view.set_store(st)
        await pilot.pause()
        done = asyncio.Event()

        async def feed() -> None:
            for text in batches:
                st.append(text)
                app.post_message(LogAppended(len(st)))
                await asyncio.sleep(0)
            done.set()

        async def keys() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await pilot.press("k")
                latencies.append(time.perf_counter() - t)
                await pilot.press("G")
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
    args = ap.parse_args()
    batches = make_batches(args.lines, args.batch)
    base = store_only(batches, args.batch)
    rate, lat = asyncio.run(with_view(batches, args.batch))
    lat_ms = sorted(x * 1000 for x in lat)
    p95 = lat_ms[int(len(lat_ms) * 0.95) - 1] if lat_ms else float("nan")
    print(f"{args.lines:,} lines in batches of {args.batch:,} (160x50, logs view following):")
    print(f"  LogStore.append alone        {base / 1000:8.0f}k lines/s")
    print(f"  absorbed by the logs view    {rate / 1000:8.0f}k lines/s  ({rate / base:.2f}x the store alone)"
          f"  target >= 100k: {'OK' if rate >= 100_000 else 'UNDER'}")
    print(f"  key latency while absorbing  median {statistics.median(lat_ms):.1f} ms, p95 {p95:.1f} ms, "
          f"max {lat_ms[-1]:.1f} ms over {len(lat_ms)} presses")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
