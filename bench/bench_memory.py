"""A week-long run's log in the store: resident memory, search's first hit and progress, jump-to-time.

The log is the sample miles log (backend.demo.sample_log) repeated with its date moved one day on per
repetition, so timestamps keep rising over any length, streamed into a LogStore in replay's chunk size (no
source file: only the store's spool is written, under --spool). Figures, each with the line count:
- RSS and peak RSS of this process after ingest (target <= 1 GB at 100M lines), the spool's size on disk;
- ingest rate, as a ratio of a plain loop over the same chunks' lines measured in this run (bytes.split);
- search: time to the first hit of a word every rollout prints, the longest gap between two progress
  batches (what a progress bar and Esc wait for at most), and the time a cancel takes to stop the scan
  (target: first hit <= 1 s);
- jump-to-time: the line of a time in the middle of the log, through the logs view's `line_at_time`
  (target <= 0.5 s);
- RSS again with what a session adds on top: a filter's view (its per-line source index, 2 bytes a line, and
  the kept lines, 4 bytes each) and a dense search's hits held as the logs view holds them (4 bytes each).

Usage: .venv/bin/python bench/bench_memory.py [--lines 1000000] [--spool /tmp] [--keep]
A 100M-line run needs about 15 GB free under --spool and a few minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.demo.sample_log import SampleRun, generate  # noqa: E402
from backend.signals.filters import FilteredLines, LineFilter, line_at_time  # noqa: E402
from backend.signals.replay import CHUNK  # noqa: E402
from backend.signals.search import search_batches  # noqa: E402
from backend.signals.store import CancelToken, LogStore  # noqa: E402

DAY0 = dt.date(2026, 8, 21)  # the sample log's date


def sample_block() -> tuple[bytes, int]:
    lines = list(generate(SampleRun(rollouts=20, noise_per_rollout=200)))
    return ("\n".join(lines) + "\n").encode(), len(lines)


def days(block: bytes, count: int) -> tuple[bytes, int]:
    """Repetition `count` of the block: the same lines a day later per repetition."""
    return block.replace(DAY0.isoformat().encode(), (DAY0 + dt.timedelta(days=count)).isoformat().encode())


def rss_mb() -> tuple[float, float]:
    status = dict(ln.split(":", 1) for ln in Path("/proc/self/status").read_text().splitlines() if ":" in ln)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def ingest(store: LogStore, block: bytes, per: int, lines: int) -> tuple[float, float]:
    """Feed about `lines` lines; returns (seconds in the store, seconds of a plain split over the same)."""
    spent = plain = 0.0
    done = rep = 0
    while done < lines:
        data = days(block, rep)
        for i in range(0, len(data), CHUNK):
            chunk = data[i : i + CHUNK]
            t = time.perf_counter()
            for _line in chunk.split(b"\n"):
                pass
            t1 = time.perf_counter()
            store.append(chunk)
            spent += time.perf_counter() - t1
            plain += t1 - t
        done += per
        rep += 1
    store.flush()
    return spent, plain


def search_figures(store: LogStore, word: str) -> tuple[float, float, float, int]:
    """(first hit s, longest gap between batches s, whole scan s, hits) of a search from the top."""
    t0 = time.perf_counter()
    first = gap = 0.0
    last = t0
    found = 0
    for batch in search_batches(store, word, ignore_case=True):
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
        if batch.hits and not found:
            first = now - t0
        found += len(batch.hits)
    return first, gap, time.perf_counter() - t0, found


def cancel_latency(store: LogStore, word: str) -> float:
    """Seconds from `cancel()` (0.2 s into a scan, from another thread) until the scan has stopped."""
    token = CancelToken()
    at: list[float] = []

    def cancel() -> None:
        at.append(time.perf_counter())
        token.cancel()

    timer = threading.Timer(0.2, cancel)
    timer.start()
    for _batch in search_batches(store, word, cancel=token):
        pass
    timer.join()
    return time.perf_counter() - at[0] if at else 0.0


def jump_figure(store: LogStore, target: str) -> tuple[float, int]:
    t = time.perf_counter()
    pos = line_at_time(store.line, len(store), target)
    return time.perf_counter() - t, pos


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--spool", default=tempfile.gettempdir(), help="where the spool file goes")
    ap.add_argument("--keep", action="store_true", help="leave the spool file")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-memory-", dir=args.spool))
    block, per = sample_block()
    base_rss, _ = rss_mb()
    store = LogStore(work, run_id="week")
    try:
        spent, plain = ingest(store, block, per, args.lines)
        n = len(store)
        rss, peak = rss_mb()
        print(
            f"{n:,} lines: RSS {rss:.0f} MB (peak {peak:.0f} MB; {base_rss:.0f} MB before the log; "
            f"target <= 1024 MB at 100M), spool {store.path.stat().st_size / 1e9:.2f} GB on disk"
        )
        print(
            f"ingest {spent:.1f} s ({n / spent / 1e6:.2f} M lines/s), ratio {plain / spent:.2f} "
            "of a plain split loop over the same chunks"
        )
        word = "perf 3: {"  # once per rollout: hits all through the log
        first, gap, whole, found = search_figures(store, word)
        print(
            f"search {word!r} (ignore case) over {n:,} lines: first hit {first:.3f} s (target <= 1 s), "
            f"longest gap between progress batches {gap * 1000:.0f} ms, whole scan {whole:.1f} s, "
            f"{found:,} hits"
        )
        print(f"cancel: the scan stops {cancel_latency(store, 'Decode batch') * 1000:.0f} ms after cancel()")
        middle = (DAY0 + dt.timedelta(days=n // per // 2)).isoformat() + " 10:10"
        secs, pos = jump_figure(store, middle)
        print(f"jump to {middle}: line {pos:,} in {secs * 1000:.0f} ms (target <= 500 ms)")
        rss, peak = rss_mb()
        print(f"after search and jump: RSS {rss:.0f} MB, peak {peak:.0f} MB")
        t = time.perf_counter()
        kept = FilteredLines(store, LineFilter(actor="engine"))
        kept.refresh()
        dense = array("I")  # what the logs view keeps of a dense search: 4 bytes a hit
        for batch in search_batches(store, "decode batch", ignore_case=True):
            dense.extend(batch.hits)
        rss, peak = rss_mb()
        print(
            f"with a filter's view ({len(kept):,} engine lines, source index built) and a dense search's "
            f"{len(dense):,} hits held ({time.perf_counter() - t:.1f} "
            f"s): RSS {rss:.0f} MB, peak {peak:.0f} MB"
        )
    finally:
        store.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
