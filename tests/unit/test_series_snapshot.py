"""The UI only ever reads a snapshot: a worker thread appending points never changes what it holds."""

from __future__ import annotations

import sys
import threading
import time

from backend.signals.monitor import RunMonitor

KEYS = ("train/loss", "train/ppo_kl", "perf/tokens_per_gpu_per_sec")


def _step_line(n: int) -> str:
    return (
        f"step {n}: {{'train/loss': {n * 0.5}, 'train/ppo_kl': {n * 1e-4}}}\n"
        f"perf {n}: {{'perf/tokens_per_gpu_per_sec': {100 + n}, 'perf/rollout_time': 3.0}}\n"
    )


def test_reading_snapshots_while_a_thread_appends_for_seconds() -> None:
    monitor = RunMonitor(rules=[])
    stop = threading.Event()

    def writer() -> None:
        n = 0
        # steps arrive out of order too (late workers): inserts in the middle, not only appends
        while not stop.is_set():
            # as the store's listener feeds it (under the monitor's lock); the snapshots are read after it
            monitor.on_log_lines(0, 2, _step_line(n) + _step_line(n // 2 if n % 3 == 0 else n + 1))
            n += 2

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a torn read shows up in seconds
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    errors: list[BaseException] = []
    reads = 0
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            snap = monitor.metrics_snapshot()
            try:
                first = {key: snap.series.by_key[key].points() for key in KEYS if key in snap.series.by_key}
                for _ in range(3):  # what the UI read once stays what it reads again
                    again = {key: snap.series.by_key[key].points() for key in first}
                    assert again == first
                reads += 1
            except (ValueError, RuntimeError, AssertionError) as err:
                errors.append(err)
                break
    finally:
        stop.set()
        thread.join(5)
        sys.setswitchinterval(old)
    assert not errors, f"a reader saw the series change under it: {errors[0]!r}"
    assert reads > 10 and len(monitor.metrics_snapshot().series.by_key["train/loss"].points()) > 100
