"""A worker that dies mid-run fails its one test and the run still ends (tests/support/crash_safe_sched.py;
xdist 3.8.0's own scheduler hangs here)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent.parent / "support"

CONFTEST = f"""
import sys
sys.path.insert(0, {str(SUPPORT)!r})


def pytest_xdist_make_scheduler(config, log):
    from crash_safe_sched import CrashSafeGroupScheduling
    return CrashSafeGroupScheduling(config, log)
"""

GROUP = """
import os
import time
import pytest

pytestmark = pytest.mark.xdist_group("{group}")


def test_first():
    time.sleep(0.2)


def test_second():
    {second}


def test_third():
    time.sleep(0.2)


def test_fourth():
    pass
"""


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_crashes.py").write_text(GROUP.format(group="a", second="os._exit(1)"))
    (tmp_path / "test_fine.py").write_text(GROUP.format(group="b", second="time.sleep(0.2)"))
    (tmp_path / "test_done_first.py").write_text(GROUP.format(group="c", second="pass"))
    return tmp_path


def test_a_crashed_worker_fails_one_test_and_the_run_ends(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            ".",
        ],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,  # xdist's own scheduler never ends here
    )
    tail = textwrap.shorten(proc.stdout[-600:], 600)
    assert proc.returncode == 1, tail
    assert "1 failed, 11 passed" in proc.stdout, tail
    assert "test_crashes.py::test_second" in proc.stdout, tail
