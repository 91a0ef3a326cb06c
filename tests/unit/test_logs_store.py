"""The scrollback store: fields, spool + index, filters, search, cancellation, threads."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest
from log_search import hits

import backend.signals.store as store_module
from backend.demo.sample_log import SampleRun, generate
from backend.signals.filters import FilteredLines, LineFilter
from backend.signals.search import SearchPatternError, search_batches
from backend.signals.store import CancelToken, LogStore

TRAIN = "\x1b[2m\x1b[36m(MegatronTrainRayActor pid=52001, ip=10.0.0.2)\x1b[0m "
RM = "\x1b[2m\x1b[36m(RolloutManager pid=51234)\x1b[0m "


@pytest.fixture
def store(tmp_path):
    s = LogStore(tmp_path / "spool", run_id="job/1 x")
    yield s
    s.close()


def test_fields_from_ray_prefix_and_miles_bracket(store: LogStore) -> None:
    store.append(
        "[2026-08-21 10:02:11.004 main] placement_group.py:113 - Creating placement group with 8 GPUs...\n"
        f"{TRAIN}[2026-08-21 10:20:05.112 actor_cell0_rank96] log_utils.py:542 - step 0: {{'train/loss': "
        f"nan}}\n{RM}[2026-08-21 10:19:40.311 rollout_manager] metrics.py:89 - perf 0: {{}}\n"
        "\x1b[33m(raylet, ip=10.0.0.3)\x1b[0m [2026-08-21 10:19:40,311 E 1 1] worker died\n"
        "\x1b[36m(autoscaler +1m2s)\x1b[0m Adding 1 node(s)\n"
    )
    driver, step, perf, raylet, autoscaler = store.lines(0, 5)
    assert (driver.proc, driver.node, driver.actor, driver.ts) == (
        "main",
        "head",
        None,
        "2026-08-21 10:02:11.004",
    )
    assert driver.message == "Creating placement group with 8 GPUs..." and driver.file == "placement_group.py"
    assert (step.actor, step.pid, step.ip, step.node, step.rank) == (
        "MegatronTrainRayActor",
        52001,
        "10.0.0.2",
        "10.0.0.2",
        96,
    )
    assert step.text.startswith("(MegatronTrainRayActor pid=52001, ip=10.0.0.2) [2026")
    assert step.message == "step 0: {'train/loss': nan}"
    assert (perf.actor, perf.pid, perf.node, perf.proc, perf.rank) == (
        "RolloutManager",
        51234,
        "head",
        "rollout_manager",
        None,
    )
    assert (raylet.actor, raylet.ip) == ("raylet", "10.0.0.3")
    assert autoscaler.text.startswith("(autoscaler +1m2s) Adding")


def test_repeated_suffix_is_stripped_and_counted(store: LogStore) -> None:
    store.append(
        f"{TRAIN}ft cls=MegatronTrainRayActor fn=train phase=start\x1b[2m [repeated 7x across cluster] (Ray "
        "deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/...)\x1b[0m\n"
        f"{TRAIN}ft cls=MegatronTrainRayActor fn=train phase=end\x1b[2m [repeated 15x across "
        f"cluster]\x1b[0m\n{TRAIN}a line that says [repeated 3x across cluster] in the middle stays\n"
    )
    a, b, c = store.lines(0, 3)
    assert a.text.endswith("phase=start") and a.repeat == 7
    assert b.text.endswith("phase=end") and b.repeat == 15
    assert c.repeat == 1 and "[repeated 3x across cluster] in the middle" in c.text


def test_spool_file_and_offset_index(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="r")
    lines = [f"line {i} " + "é" * (i % 5) for i in range(5000)]
    text = "\n".join(lines) + "\n"
    data = text.encode()
    for i in range(0, len(data), 1013):  # arbitrary chunking, split mid-line and mid-character
        store.append(data[i : i + 1013])
    assert len(store) == 5000
    assert store.text(4321) == lines[4321] and store.line(-1).text == lines[-1]
    assert [x.text for x in store.lines(2998, 3002)] == lines[2998:3002]
    assert store.lines(4990, 9999)[-1].index == 4999 and store.lines(10, 5) == []
    with pytest.raises(IndexError):
        store.text(5000)
    assert store.path.read_bytes() == data  # the spool holds exactly the sanitised lines
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert len(store._cum) == 5001 and store._cum.itemsize == 4  # 4 bytes of index per line
    store.close()


def test_offsets_past_each_4gib_of_spool(tmp_path, monkeypatch) -> None:
    """Offsets are 32-bit words plus the lines where each further 4 GiB starts: shrink 4 GiB to 1 KiB and
    every line still reads back, whether a chunk crosses one boundary, several, or ends on one."""
    monkeypatch.setattr(store_module, "_WRAP", 1 << 10)
    store = LogStore(tmp_path, run_id="wrap")
    lines = [f"line {i} " + "x" * (i % 97) for i in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    pos = 0
    for size in (100, 999, 5000, 1 << 16, 1 << 20):  # chunks below, across and far past the boundary
        store.append(data[pos : pos + size])
        pos += size
    assert len(store) == 3000 and len(store._wraps) > 100
    assert [store.text(i) for i in range(3000)] == lines
    assert [x.text for x in store.lines(1000, 2000)] == lines[1000:2000]
    assert hits(store, "line 2999 ") == [2999] and store.spool_bytes(0, 3000) == data
    store.close()


def test_run_id_cannot_escape_the_spool_dir(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="../../etc/passwd")
    assert store.path.parent == tmp_path
    store.close()


def test_interleaved_actors_filter_by_actor_rank_node(store: LogStore) -> None:
    run = SampleRun(rollouts=2, train_ranks=4, noise_per_rollout=10, remote_ip="10.0.0.9")
    store.append("\n".join(generate(run)) + "\n")
    sources = {s.prefix: s for s in store.sources()}
    assert sources["MegatronTrainRayActor pid=52001, ip=10.0.0.9"].rank == 0  # learnt from its bracket lines
    by_actor = FilteredLines(store, LineFilter(actor="RolloutManager"))
    by_actor.refresh()
    assert len(by_actor) > 0 and all(by_actor.line(k).actor == "RolloutManager" for k in range(len(by_actor)))
    rank0 = FilteredLines(store, LineFilter(rank=0))
    rank0.refresh()
    texts = [rank0.line(k).text for k in range(len(rank0))]
    assert any("step 0:" in t for t in texts) and all("pid=52001" in t for t in texts)
    remote = FilteredLines(store, LineFilter(node="10.0.0.9"))
    remote.refresh()
    head = FilteredLines(store, LineFilter(node="head"))
    head.refresh()
    assert len(remote) + len(head) == len(store)
    before = len(rank0)
    store.append(
        "(MegatronTrainRayActor pid=52001, ip=10.0.0.9) "
        "[2026-08-21 11:00:00.000 actor_cell0_rank0] x.py:1 - new\n"
    )
    assert rank0.refresh() == 1 and len(rank0) == before + 1  # incremental catch-up


def test_level_filter_and_level_field(store: LogStore) -> None:
    store.append(
        f"{TRAIN}Traceback (most recent call last):\n"
        f'{TRAIN}  File "x.py", line 1\n'
        f"{TRAIN}RuntimeError: CUDA out of memory\n"
        f"{RM}WARNING: slow engine\n"
        f"{RM}all good\n"
    )
    assert [line.level for line in store.lines(0, 5)] == ["error", "info", "error", "warning", "info"]
    errors = FilteredLines(store, LineFilter(min_level="error"))
    errors.refresh()
    assert list(errors.indices) == [0, 2]
    warn_rm = FilteredLines(store, LineFilter(actor="RolloutManager", min_level="warning"))
    warn_rm.refresh()
    assert list(warn_rm.indices) == [3]


def test_search_substring_regex_case_and_filter(store: LogStore) -> None:
    run = SampleRun(rollouts=3, noise_per_rollout=30)
    store.append("\n".join(generate(run)) + "\n")
    n = len(store)
    texts = [store.text(i) for i in range(n)]
    assert hits(store, "step 3:") == [i for i, t in enumerate(texts) if "step 3:" in t]
    dense = hits(store, "Decode batch")  # most lines hit: the dense path
    assert dense == [i for i, t in enumerate(texts) if "Decode batch" in t] and len(dense) == 90
    assert hits(store, "decode BATCH", ignore_case=True) == dense
    assert hits(store, "STEP 3:", ignore_case=True) == hits(store, "step 3:")
    store.append("mixed TrAcEbAcK here\n")
    assert hits(store, "traceback", ignore_case=True) == [n] and hits(store, "traceback") == []
    rx = hits(store, r"perf \d+: \{'perf/sleep", regex=True)
    assert len(rx) == 3 and all("train_metric_utils.py" in texts[i] for i in rx)
    only_rm = hits(store, "perf", flt=LineFilter(actor="RolloutManager"))
    assert only_rm and all(texts[i].startswith("(RolloutManager") for i in only_rm)
    assert hits(store, "zzz-not-there") == [] and hits(store, "") == []
    assert hits(store, "step", start=n - 5, stop=n) == [i for i in range(n - 5, n) if "step" in texts[i]]
    with pytest.raises(SearchPatternError, match="bad search pattern"):
        hits(store, "(unclosed", regex=True)


def test_search_is_cancellable_and_reports_progress(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="big")
    block = "".join(f"row {i} needle\n" for i in range(20000))
    for _ in range(10):
        store.append(block)
    token = CancelToken()
    seen: list[int] = []
    for batch in search_batches(store, "needle", cancel=token, block_bytes=1 << 16):
        seen.extend(batch.hits)
        if len(seen) >= 10:
            token.cancel()
    assert 10 <= len(seen) < 200_000  # stopped at the next block, not at the end

    # every block reports how far it has read, hit or not: the view's progress bar climbs to the end
    batches = list(search_batches(store, "row 19999 ", block_bytes=1 << 16))
    scanned = [b.scanned for b in batches]
    assert len(batches) > 10 and scanned == sorted(scanned) and scanned[-1] == batches[-1].stop == len(store)
    assert [i for b in batches for i in b.hits] == [19999 + 20000 * k for k in range(10)]
    store.close()


def test_subscribers_get_each_batch_once(store: LogStore) -> None:
    got: list[tuple[int, int, str]] = []
    unsubscribe = store.subscribe(lambda first, count, text: got.append((first, count, text)))
    store.append("a\nb")
    store.append("c\n\x1b[31md\n")
    unsubscribe()
    store.append("e\n")
    assert got == [(0, 1, "a\n"), (1, 2, "bc\nd\n")]
    assert store.pending_text == "" and len(store) == 4


def test_flush_stores_the_last_partial_line(store: LogStore) -> None:
    store.append("done\nno newline at end \x1b[1m!")
    assert len(store) == 1 and store.pending_text == "no newline at end !"
    assert store.flush() == 1 and store.line(1).text == "no newline at end !"
    assert store.flush() == 0


def test_one_writer_many_readers(tmp_path) -> None:
    store = LogStore(tmp_path, run_id="threads", cache_lines=64)
    total, errors = 60_000, []

    def writer() -> None:
        for base in range(0, total, 1000):
            store.append("".join(f"{TRAIN}row {i:06d}\n" for i in range(base, base + 1000)))

    def reader() -> None:
        try:
            deadline = time.monotonic() + 30
            while len(store) < total and time.monotonic() < deadline:
                n = len(store)
                if n:
                    for i in (0, n // 2, n - 1):
                        line = store.line(i)
                        assert line.text.endswith(f"row {i:06d}") and line.pid == 52001, line
                    found = hits(store, "row 000999", stop=n)
                    assert found == ([999] if n > 999 else [])
        except AssertionError as err:  # pragma: no cover - reported below
            errors.append(err)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    writer()
    for t in readers:
        t.join(60)
    assert not errors and len(store) == total
    assert len(store._cache) <= 64  # memory for lines stays bounded; text lives in the spool
    store.close()
