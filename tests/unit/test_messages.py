"""Worker messages that a newer one supersedes say so (`can_replace`): Textual then drops the older one when
both wait in a view's queue, so a busy view draws the newest state once instead of every stale one."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import metrics_view

from backend.demo.sample_run import snapshot, store
from console.messages import (
    AlertsChanged,
    HistoryProgress,
    LogAppended,
    LogStoreOpened,
    MetricsArrived,
    Notice,
    SnapshotArrived,
)


def test_a_newer_whole_state_replaces_the_older() -> None:
    assert MetricsArrived(metrics_view(3)).can_replace(MetricsArrived(metrics_view(4)))
    assert SnapshotArrived(snapshot()).can_replace(SnapshotArrived(snapshot()))
    assert AlertsChanged(()).can_replace(AlertsChanged(()))
    assert LogAppended(10).can_replace(LogAppended(20))
    assert not MetricsArrived(metrics_view(3)).can_replace(LogAppended(20))  # another kind is never dropped
    assert not Notice("a").can_replace(Notice("b"))  # every notice is shown


def test_only_the_newest_store_is_shown(tmp_path: Path) -> None:
    first, second = store(tmp_path / "a", 3), store(tmp_path / "b", 3)
    assert LogStoreOpened(first).can_replace(LogStoreOpened(second))
    assert not LogStoreOpened(first).can_replace(LogAppended(3))
    first.close()
    second.close()


def test_history_progress_keeps_its_end_and_other_jobs() -> None:
    assert HistoryProgress("job-1", 10, done=False).can_replace(HistoryProgress("job-1", 20, done=False))
    assert HistoryProgress("job-1", 10, done=False).can_replace(HistoryProgress("job-1", 20, done=True))
    assert not HistoryProgress("job-1", 20, done=True).can_replace(HistoryProgress("job-1", 20, done=False))
    assert not HistoryProgress("job-1", 10, done=False).can_replace(HistoryProgress("job-2", 0, done=False))
