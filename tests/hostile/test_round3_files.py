"""Hostile input, round 3 (issue 36): the files of the newer surfaces — the watcher's incident ledger, each
operator's "since you last looked" marks, the watcher's notified list and config, the log spools — go through
backend/safe_paths.py like the audit log: a link, a FIFO, a device or a foreign directory at the path is
refused or skipped, never followed and never a hang; names built from job ids are bounded and kept apart."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.cluster import watcher_job
from backend.cluster.incidents import LEDGER, Entry, Ledger, ledger_dir, since_last_looked
from backend.signals.store import LogStore, LogStoreError


def _returns_within(fn: Callable[[], object], seconds: float = 5.0) -> bool:
    """Whether `fn` returns (or raises) within `seconds`: a FIFO opened for reading blocks for ever."""
    return _within(fn, seconds)[0]


def _within(fn: Callable[[], object], seconds: float = 5.0) -> tuple[bool, object]:
    """(whether `fn` ended within `seconds`, what it returned or raised), run in a thread that may hang."""
    done = threading.Event()
    out: list[object] = [None]

    def run() -> None:
        try:
            out[0] = fn()
        except BaseException as err:  # the test looks at what came back
            out[0] = err
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds), out[0]


def _unblock(fifo: Path) -> None:
    """Give a reader stuck on `fifo` its writer, so a failed test leaves no thread blocked."""
    with contextlib.suppress(OSError):  # ENXIO: no reader is waiting, as it should be
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_at_the_ledger_path_never_hangs_status(tmp_path: Path) -> None:
    directory = ledger_dir(tmp_path, "run-1")
    directory.mkdir(parents=True, mode=0o700)
    os.mkfifo(directory / LEDGER)
    try:
        assert _within(lambda: since_last_looked(directory, "alice")) == (True, [])
    finally:
        _unblock(directory / LEDGER)


def test_a_fifo_or_dev_zero_at_an_operators_seen_file_is_no_hang_and_no_memory_error(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    Ledger(directory).add(Entry("cause", "c1", alert="cuda-oom"))
    seen = directory / "seen"
    seen.mkdir(mode=0o700)
    (seen / "alice.json").symlink_to("/dev/zero")
    ended, got = _within(lambda: [e.key for e in since_last_looked(directory, "alice", mark=False)])
    assert (ended, got) == (True, ["c1"])
    os.mkfifo(seen / "bob.json")
    try:
        assert _returns_within(lambda: since_last_looked(directory, "bob", mark=False))
    finally:
        _unblock(seen / "bob.json")


def test_marking_seen_never_writes_through_a_link(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    Ledger(directory).add(Entry("cause", "c1", alert="cuda-oom"))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    seen = directory / "seen"
    seen.mkdir(mode=0o700)
    for name in ("alice.json", "alice.json.tmp", f"alice.{os.getpid()}.tmp"):
        (seen / name).symlink_to(victim)
    since_last_looked(directory, "alice")
    assert victim.read_text() == "keep"


def test_a_ledger_directory_of_another_user_or_open_to_all_is_never_written(tmp_path: Path) -> None:
    shared = tmp_path / "runs" / "run-1"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    with pytest.raises(Exception, match="others may write"):
        Ledger(shared).add(Entry("cause", "c1"))
    assert not (shared / LEDGER).exists()


def test_a_link_at_the_ledger_path_is_never_appended_to(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    Ledger(directory).add(Entry("cause", "c1"))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (directory / LEDGER).unlink()
    (directory / LEDGER).symlink_to(victim)
    with pytest.raises(Exception, match="symlink"):
        Ledger(directory).add(Entry("cause", "c2"))
    assert victim.read_text() == "keep"


def test_two_job_ids_that_differ_only_in_unsafe_characters_get_two_ledgers(tmp_path: Path) -> None:
    assert ledger_dir(tmp_path, "run a") != ledger_dir(tmp_path, "run_a")
    assert ledger_dir(tmp_path, "run/a") != ledger_dir(tmp_path, "run_a")
    assert ledger_dir(tmp_path, "run-1").name == "run-1"  # a plain Ray id keeps its directory


def test_a_long_cjk_job_id_gets_a_ledger_and_a_watcher_config(tmp_path: Path) -> None:
    directory = ledger_dir(tmp_path, "训练" * 60)
    assert len(directory.name.encode()) <= 255
    assert Ledger(directory).add(Entry("cause", "c1"))
    assert [e.key for e in Ledger(directory).entries()] == ["c1"]


def test_the_notified_list_never_follows_a_link_nor_hangs_on_a_fifo(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    (directory / watcher_job.NOTIFIED).symlink_to("/dev/zero")
    assert _within(lambda: watcher_job.read_notified(directory)) == (True, set())
    (directory / watcher_job.NOTIFIED).unlink()
    os.mkfifo(directory / watcher_job.NOTIFIED)
    try:
        assert _returns_within(lambda: watcher_job.read_notified(directory))
    finally:
        _unblock(directory / watcher_job.NOTIFIED)


def test_a_fifo_at_the_watcher_config_is_one_line_never_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "cfg.json")
    try:
        assert _returns_within(lambda: watcher_job.read_config(tmp_path / "cfg.json"))
    finally:
        _unblock(tmp_path / "cfg.json")


def test_log_spools_of_two_job_ids_that_differ_only_in_unsafe_characters_are_apart(tmp_path: Path) -> None:
    first = LogStore(tmp_path, run_id="run a")
    first.append("first run's line\n")
    second = LogStore(tmp_path, run_id="run_a")  # opening it truncated the first run's spool
    try:
        assert first.path != second.path
        assert first.text(0) == "first run's line"
    finally:
        first.close()
        second.close()


def test_a_300_character_job_id_still_gets_a_log_spool(tmp_path: Path) -> None:
    store = LogStore(tmp_path, run_id="r" * 300)
    try:
        store.append("a line\n")
        assert len(store.path.name) <= 255 and store.text(0) == "a line"
    finally:
        store.close()


def test_a_spool_directory_open_to_all_is_refused_in_one_line(tmp_path: Path) -> None:
    shared = tmp_path / "logs"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(LogStoreError, match="others may write") as err:
        LogStore(shared, run_id="run-1")
    assert "\n" not in str(err.value)
