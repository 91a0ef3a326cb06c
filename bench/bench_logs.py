"""Log store benchmarks; prints figures as ratios against baselines measured in the same run.

1. parse-and-store throughput vs plain Python iteration over the same file (target >= 0.25), and with the
   metrics/alerts monitor subscribed, with and without its prefilter (target >= 0.2);
2. the same with the tolerant grammar vs the grammar it replaced (target >= 0.8x): the old signals package is
   taken from git (the parent of the commit that split backend/signals/logs.py) into a temporary directory
   and run on the same file in the same process, interleaved with the new one;
3. resident memory after 10M lines, measured in a fresh subprocess (target <= 300 MB);
4. search over 1M lines vs `grep -c` on the same spool (target <= 3x).

Usage: .venv/bin/python bench/bench_logs.py [--lines 1000000] [--memory-lines 10000000] [--skip-memory]
                                            [--old-rev REV] [--only-grammar] [--only-ingest] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.demo.sample_log import SampleRun, generate  # noqa: E402
from backend.sanitize import sanitize_text  # noqa: E402
from backend.signals.monitor import RunMonitor  # noqa: E402
from backend.signals.pure_scan import Plan  # noqa: E402
from backend.signals.scan_engine import HYPERSCAN, PURE, make_engine  # noqa: E402
from backend.signals.search import search_batches  # noqa: E402
from backend.signals.store import LogStore  # noqa: E402

CHUNK = 1 << 20


def make_log(path: Path, lines: int) -> int:
    """A realistic log of about `lines` lines (mostly SGLang/ft noise, metric lines every rollout)."""
    per = sum(1 for _ in generate(SampleRun(rollouts=1, noise_per_rollout=200, train_ranks=8)))
    run = SampleRun(rollouts=max(1, lines // per), noise_per_rollout=200, train_ranks=8, save_every=10)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        buf = []
        for line in generate(run):
            buf.append(line)
            n += 1
            if len(buf) >= 10000:
                fh.write("\n".join(buf) + "\n")
                buf = []
        if buf:
            fh.write("\n".join(buf) + "\n")
    return n


def best_of(runs: int, fn, clock=time.perf_counter) -> float:
    best = float("inf")
    for _ in range(runs):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def live_monitor_cpu(log: Path, rounds: int, lines: int = 60_000, per_chunk: int = 20) -> dict[bool, float]:
    """CPU microseconds per line the monitor spends on a live tail's small chunks, with and without its
    prefilter (interleaved, best of `rounds`)."""
    with open(log, encoding="utf-8") as fh:
        head = [line for _, line in zip(range(lines), fh, strict=False)]
    chunks = [sanitize_text("".join(head[i : i + per_chunk])) for i in range(0, len(head), per_chunk)]
    best = {True: float("inf"), False: float("inf")}
    for _ in range(rounds):
        for prefilter in best:
            monitor = RunMonitor(prefilter=prefilter)
            c = time.process_time()
            for i, chunk in enumerate(chunks):
                monitor.on_log_lines(i * per_chunk, per_chunk, chunk)
            best[prefilter] = min(best[prefilter], time.process_time() - c)
    return {k: v / len(head) * 1e6 for k, v in best.items()}


TQDM_BAR = "Rollout generation:  42%|████▎     | 27/64 [00:13<00:18,  2.0it/s]"
BAR_EVERY = (
    20  # lines: real rollout logs hold a tqdm bar this often, so nearly every 1 MiB chunk is non-ASCII
)


def make_real_shaped(sample: Path, path: Path) -> int:
    """The sample log with a tqdm bar (block characters) on every BAR_EVERY-th line, as real rollout logs
    hold them: Python holds such a chunk at two bytes a character and every pass over it costs double."""
    n = 0
    with (
        open(sample, encoding="utf-8", newline="") as src,
        open(path, "w", encoding="utf-8", newline="") as out,
    ):
        for n, line in enumerate(src, 1):
            out.write(line if n % BAR_EVERY else line[:-1] + " " + TQDM_BAR + "\n")
    return n


def best_times(
    runs: dict[str, Callable[[], object]], rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Each run's best wall-clock and CPU seconds over `rounds`, the runs interleaved (a shared machine's load
    then moves them alike)."""
    wall = {k: float("inf") for k in runs}
    cpu = dict(wall)
    for _ in range(rounds):
        for key, fn in runs.items():
            t, c = time.perf_counter(), time.process_time()
            result = fn()
            wall[key] = min(wall[key], time.perf_counter() - t)
            cpu[key] = min(cpu[key], time.process_time() - c)
            discard(result)
    return wall, cpu


def discard(result: object) -> None:
    """Close a run's store and delete its spool, after it was timed: the runs write a spool each (~170 MB),
    and a dozen of them left in the page cache pass the kernel's dirty limit, after which every `pwrite`
    waits for the disk (measured: the store's writes 0.15 s in a fresh run, 1.2 s after ten). One ingest of
    a real log writes its spool once."""
    if isinstance(result, LogStore):
        result.close()
        Path(result.path).unlink(missing_ok=True)


def engine_ratios(logs: dict[str, Path], work: Path, rounds: int) -> None:
    """Per log: the plain loop, the store, and store + monitor on each scan engine, interleaved, best of
    `rounds`, as ratios to the plain loop by wall clock and by CPU time (issue 33's targets)."""
    engines = [PURE] + ([HYPERSCAN] if _has_hyperscan() else [])
    for name, log in logs.items():
        n = sum(1 for _ in open(log, "rb"))
        runs = {
            "plain": lambda log=log: iterate(log),
            "store": lambda log=log: ingest(log, work / "e0", False),
        }
        for engine in engines:
            runs[engine] = lambda log=log, e=engine: ingest(log, work / f"e-{e}", True, engine=e)
        wall, cpu = best_times(runs, rounds)
        print(f"{name} log: {n} lines, {log.stat().st_size / 1e6:.0f} MB")
        for key in runs:
            if key != "plain":
                what = "store" if key == "store" else f"store + monitor, {key} scan"
                print(
                    f"  {what}: ratio to the plain loop {wall['plain'] / wall[key]:.3f} (wall), "
                    f"{cpu['plain'] / cpu[key]:.3f} (CPU); {n / wall[key] / 1e6:.2f} M lines/s"
                )


def _has_hyperscan() -> bool:
    try:
        make_engine(HYPERSCAN)
    except Exception:
        return False
    return True


def ingest_ratios(log: Path, work: Path, n: int, rounds: int) -> None:
    """Plain loop, store, store + monitor with and without its prefilter: runs interleaved, best of
    `rounds` each, by wall clock and by this process's CPU time (a shared machine's load moves the first)."""
    runs = {
        "plain": lambda: iterate(log),
        "store": lambda: ingest(log, work / "r1", False),
        "monitor": lambda: ingest(log, work / "r2", True),
        "unfiltered": lambda: ingest(log, work / "r3", True, prefilter=False),
    }
    wall, cpu = best_times(runs, rounds)
    for key, label in (
        ("store", "LogStore.append"),
        ("monitor", "LogStore.append + metrics/alerts monitor (target >= 0.2)"),
        ("unfiltered", "LogStore.append + monitor without its prefilter"),
    ):
        print(
            f"{label}: {n / wall[key] / 1e6:.2f} M lines/s, ratio to the plain loop "
            f"{wall['plain'] / wall[key]:.3f} (wall), {cpu['plain'] / cpu[key]:.3f} (CPU)"
        )
    live_per_line = live_monitor_cpu(log, rounds)
    print(
        "a live tail (the monitor fed 20-line chunks, as the follower flushes them): "
        f"{live_per_line[True]:.2f} us CPU per line with the prefilter, {live_per_line[False]:.2f} without"
    )
    mon = cpu["monitor"] - cpu["store"]
    print(
        f"the monitor alone: {mon / n * 1e6:.2f} us CPU per line with the prefilter, "
        f"{(cpu['unfiltered'] - cpu['store']) / n * 1e6:.2f} "
        f"without; the plain loop {cpu['plain'] / n * 1e6:.2f}"
    )
    budget = (cpu["plain"] / 0.2 - cpu["store"]) / n * 1e6
    passes, per_line = prefilter_passes(log, n)
    metric_lines = metric_records_cost(log, n)
    print(
        f"the monitor's budget at 0.2 of the plain loop: {budget:.2f} us a line; the prefilter's {passes} "
        f"literal passes (pieces no rare character finds) alone cost {per_line:.2f} us a line "
        f"({per_line / budget:.2f}x the budget); the metric records alone (parse, series, alert rules, fed "
        f"only the lines the prefilter keeps) {metric_lines:.2f} us a line ({metric_lines / budget:.2f}x)"
    )


def metric_records_cost(log: Path, n: int) -> float:
    """CPU per log line of the metrics path alone: a monitor's collector (its alert rules subscribed) fed
    only the lines the prefilter kept, as the monitor feeds it."""
    with open(log, "rb") as fh:
        chunks = [sanitize_text(c.decode("utf-8", "replace")) for c in iter(lambda: fh.read(CHUNK), b"")]
    cut = [c[: c.rfind("\n") + 1] for c in chunks]  # complete lines only (a line across two is left out)
    kept = [RunMonitor().prefilter.scan(c).lines for c in cut]  # type: ignore[union-attr]
    best = float("inf")
    for _ in range(3):
        collector = RunMonitor().collector
        c = time.process_time()
        for lines in kept:
            collector.feed_text(lines)
        best = min(best, time.process_time() - c)
    return best / n * 1e6


def prefilter_passes(log: Path, n: int) -> tuple[int, float]:
    """(how many pieces the prefilter finds by a whole pass of `str.find`, their passes' CPU per line): a
    floor under any prefilter built on `str.find`, whatever it does with what the passes find."""
    text = log.read_text(encoding="utf-8")
    needles = RunMonitor().prefilter.needles  # type: ignore[union-attr]
    sample = text[: 1 << 16]
    pieces = [
        piece
        for group in (needles.lines, needles.flat)
        for piece in Plan.for_sample(group, sample).by_anchor
        if len(piece) > 1
    ]
    best = float("inf")
    for _ in range(3):
        c = time.process_time()
        for piece in pieces:
            text.find(piece + "\x00")  # absent: one whole pass
        best = min(best, time.process_time() - c)
    return len(pieces), best / n * 1e6


def iterate(path: Path) -> None:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for _line in fh:
            pass


def ingest(
    path: Path, spool: Path, with_monitor: bool, prefilter: bool = True, engine: str | None = None
) -> LogStore:
    store = LogStore(spool, run_id="bench")
    if with_monitor:
        chosen = make_engine(engine) if engine is not None else None
        store.subscribe(RunMonitor(prefilter=prefilter, engine=chosen).on_log_lines)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            store.append(chunk)
    store.flush()
    return store


def old_signals(work: Path, rev: str | None) -> tuple[type, type, list]:
    """(LogStore, RunMonitor, alert rules) of the signals package as it was at `rev` (default: before the
    tolerant grammar), imported from a temporary copy as the package `old_signals`."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    if rev is None:
        rev = git("rev-list", "-1", "HEAD", "--", "backend/signals/logs.py").strip() + "^"
    pkg = work / "old_signals"
    pkg.mkdir()
    for name in git("ls-tree", "--name-only", f"{rev}:backend/signals").split():
        if name.endswith(".py"):
            source = git("show", f"{rev}:backend/signals/{name}")
            (pkg / name).write_text(re.sub(r"\bbackend\.signals\b", "old_signals", source), encoding="utf-8")
    (work / "old_alerts.toml").write_text(git("show", f"{rev}:configs/alerts.toml"), encoding="utf-8")
    sys.path.insert(0, str(work))
    logs = importlib.import_module("old_signals.logs")
    monitor = importlib.import_module("old_signals.monitor")
    alerts = importlib.import_module("old_signals.alerts")
    return logs.LogStore, monitor.RunMonitor, alerts.load_rules(work / "old_alerts.toml")


def grammar_ratio(log: Path, work: Path, n: int, rev: str | None, rounds: int) -> None:
    """New grammar vs old on the same file, runs interleaved (ABAB...) so both see the same machine load;
    the best of `rounds` each."""
    old_store, old_monitor, old_rules = old_signals(work, rev)

    def run(store_cls: type, monitor: object | None, spool: Path) -> None:
        store = store_cls(spool, run_id="bench")
        if monitor is not None:
            store.subscribe(monitor.on_log_lines)  # type: ignore[attr-defined]
        with open(log, "rb") as fh:
            while chunk := fh.read(CHUNK):
                store.append(chunk)
        store.flush()
        store.close()

    best = {k: float("inf") for k in ("old", "new", "old+monitor", "new+monitor")}
    for _ in range(rounds):
        for key, fn in (
            ("old", lambda: run(old_store, None, work / "o1")),
            ("new", lambda: run(LogStore, None, work / "n1")),
            ("old+monitor", lambda: run(old_store, old_monitor(rules=old_rules), work / "o2")),
            ("new+monitor", lambda: run(LogStore, RunMonitor(), work / "n2")),
        ):
            t = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - t)
    for what in ("", "+monitor"):
        old, new = best["old" + what], best["new" + what]
        label = "LogStore.append" + (" + metrics/alerts monitor" if what else "")
        print(
            f"{label}, new grammar vs old: {n / new / 1e6:.2f} vs {n / old / 1e6:.2f} M lines/s, "
            f"ratio {old / new:.2f} (target >= 0.8)"
        )


def memory_child(lines: int, spool: str) -> None:
    """Runs in a subprocess: ingest `lines` lines, print VmRSS/VmHWM in MB and seconds."""
    block_lines = list(generate(SampleRun(rollouts=20, noise_per_rollout=200)))
    block = ("\n".join(block_lines) + "\n").encode()
    per = len(block_lines)
    store = LogStore(spool, run_id="mem")
    t = time.perf_counter()
    done = 0
    while done < lines:
        for i in range(0, len(block), CHUNK):
            store.append(block[i : i + CHUNK])
        done += per
    elapsed = time.perf_counter() - t
    n_sources = len(store.sources())  # builds the per-line source index too (what the first filter does)
    status = Path("/proc/self/status").read_text()
    rss = {
        k: int(v.split()[0]) / 1024
        for k, v in (ln.split(":", 1) for ln in status.splitlines())
        if k in ("VmRSS", "VmHWM")
    }
    spool_mb = os.path.getsize(store.path) / 1e6
    mid = store.line(len(store) // 2)
    print(
        f"{len(store)} {rss['VmRSS']:.1f} {rss['VmHWM']:.1f} "
        f"{elapsed:.1f} {spool_mb:.0f} {bool(mid.text)} {n_sources}"
    )
    store.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--memory-lines", type=int, default=10_000_000)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument(
        "--old-rev", default=None, help="the signals package to compare the grammar with (git rev)"
    )
    ap.add_argument("--only-grammar", action="store_true", help="only the new-vs-old grammar figures")
    ap.add_argument(
        "--only-engines",
        action="store_true",
        help="only plain loop vs store vs store + monitor on each scan engine, sample and real-shaped log",
    )
    ap.add_argument("--only-ingest", action="store_true", help="only plain loop vs store vs store + monitor")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the new-vs-old figures")
    ap.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--spool", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.spool)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    try:
        log = work / "job.log"
        n = make_log(log, args.lines)
        size = log.stat().st_size
        print(f"sample log: {n} lines, {size / 1e6:.0f} MB ({size / n:.0f} B/line)")
        if args.only_engines:
            real = work / "real.log"
            make_real_shaped(log, real)
            engine_ratios({"sample": log, "real-shaped (non-ASCII chunks)": real}, work, args.rounds)
            return 0
        if args.only_ingest:
            ingest_ratios(log, work, n, args.rounds)
            return 0
        grammar_ratio(log, work, n, args.old_rev, args.rounds)
        if args.only_grammar:
            return 0

        base = best_of(3, lambda: iterate(log))
        store_t = best_of(3, lambda: ingest(log, work / "s1", False).close())
        mon_t = best_of(2, lambda: ingest(log, work / "s2", True).close())
        unfiltered_t = best_of(2, lambda: ingest(log, work / "s5", True, prefilter=False).close())

        def ingest_and_index() -> None:
            s = ingest(log, work / "s4", False)
            s.sources()
            s.close()

        idx_t = best_of(2, ingest_and_index)
        print(f"plain iteration: {n / base / 1e6:.2f} M lines/s")
        print(
            f"LogStore.append (sanitise, fields, spool, index): {n / store_t / 1e6:.2f} M lines/s, "
            f"ratio {base / store_t:.2f} (target >= 0.25)"
        )
        print(
            f"  + building the per-line source index (what the first filter does): {n / idx_t / 1e6:.2f} M "
            f"lines/s, ratio {base / idx_t:.2f}"
        )
        print(
            f"  + metrics/alerts monitor subscribed: {n / mon_t / 1e6:.2f} M lines/s, ratio "
            f"{base / mon_t:.2f} (target >= 0.2); without its prefilter {n / unfiltered_t / 1e6:.2f} M "
            f"lines/s, ratio {base / unfiltered_t:.2f}"
        )

        store = ingest(log, work / "s3", False)
        grep = shutil.which("grep")
        for label, pattern, kwargs, grep_args in (
            ("substring", "gen throughput", {}, ["-c", "-F"]),
            ("substring, rare", "step 17:", {}, ["-c", "-F"]),
            ("ignore-case", "TRACEBACK", {"ignore_case": True}, ["-c", "-F", "-i"]),
            ("ignore-case, dense", "GEN Throughput", {"ignore_case": True}, ["-c", "-F", "-i"]),
            ("regex", r"perf \d+: \{", {"regex": True}, ["-c", "-E"]),
        ):
            hits = 0

            def run_search(pattern: str = pattern, kwargs: dict = kwargs) -> None:
                nonlocal hits  # the way the logs view's search worker consumes it: array batches
                hits = sum(len(batch.hits) for batch in search_batches(store, pattern, **kwargs))

            def run_search_ints(pattern: str = pattern, kwargs: dict = kwargs) -> None:
                for batch in search_batches(store, pattern, **kwargs):
                    for _ in batch.hits:
                        pass

            ours = best_of(3, run_search)
            ours_ints = best_of(2, run_search_ints)
            grep_pattern = pattern.replace(r"\d", "[0-9]").replace(r"\{", "[{]")
            theirs = best_of(
                3,
                lambda gp=grep_pattern, ga=grep_args: subprocess.run(
                    [grep, *ga, gp, str(store.path)], capture_output=True, check=False
                ),
            )
            g = subprocess.run(
                [grep, *grep_args, grep_pattern, str(store.path)], capture_output=True, text=True, check=False
            )
            print(
                f"search {label} over {len(store)} lines: {ours * 1000:.0f} ms, {hits} hits; grep -c "
                f"{theirs * 1000:.0f} ms ({g.stdout.strip()} hits): ratio {ours / theirs:.2f}x (target <= "
                f"3x); one int at a time: {ours_ints / theirs:.2f}x"
            )
        lowered = best_of(3, lambda: store.path.read_bytes().lower())
        read = best_of(3, lambda: store.path.read_bytes())
        grep_ci = best_of(
            3,
            lambda: subprocess.run(
                [grep, "-c", "-F", "-i", "GEN Throughput", str(store.path)], capture_output=True, check=False
            ),
        )
        print(
            f"floor of a case-insensitive search in Python: bytes.lower over the spool alone "
            f"{(lowered - read) * 1000:.0f} ms, {(lowered - read) / grep_ci:.2f}x grep -c -i's whole search"
        )
        store.close()

        if not args.skip_memory:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--memory-child",
                    str(args.memory_lines),
                    "--spool",
                    str(work / "mem"),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            lines, rss, hwm, secs, spool_mb = int(out[0]), float(out[1]), float(out[2]), float(out[3]), out[4]
            print(
                f"memory after {lines} lines (+ source index, {out[6]} sources): RSS {rss:.0f} MB, peak "
                f"{hwm:.0f} MB (target <= 300 MB); "
                f"ingest {secs:.0f} s ({lines / secs / 1e6:.2f} M lines/s), spool {spool_mb} MB on disk"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
