"""Hostile input, round 2 (issue 36): faults are said. A full disk under the log spool, a FIFO at the spool's
path, an unusable temp dir: one line (a ConsoleError the app shows as a notice and the CLI prints), never an
OSError that ends a reader in silence (the app's "loading history" without end) or an internal error."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from backend.errors import ConsoleError
from backend.signals import store as store_module
from backend.signals.ingest import RunLog
from console.cli import main


def test_a_fifo_at_the_spool_path_is_one_line_never_a_spool(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job-1.log")
    with pytest.raises(ConsoleError, match="not a regular file"):
        RunLog.open(tmp_path, "job-1")


def test_a_full_disk_under_the_spool_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_log = RunLog.open(tmp_path, "job-1")
    try:

        def full(*_: object) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(store_module.os, "pwrite", full)
        with pytest.raises(ConsoleError, match="No space left on device"):
            run_log.add("step 1\n")
    finally:
        monkeypatch.undo()
        run_log.close()


def test_an_unusable_temp_dir_makes_metrics_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.log"
    log.write_text("hello\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    code = main(["metrics", "--from-log", str(log), "--json"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot create a scratch spool" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1
