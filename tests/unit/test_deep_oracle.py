"""Runs tests/deep inside the oracle venv (.venv-deep, built by tests/deep/build_env.sh from scripts/test).

The deep tests need megatron-core, megatron-bridge and sglang, which live only in that venv, so this test
starts its interpreter on them and fails with the deep run's own report if any deep test fails. Without
the venv it skips with the reason -- except under CI, where scripts/test always builds it, so a missing
venv there is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEEP_PYTHON = REPO / ".venv-deep" / "bin" / "python"
MARKER = REPO / ".venv-deep" / ".ultra-console-deep-ok"
MIN_TESTS = 27  # the deep suite's size; fewer ran means something was silently not collected


@pytest.mark.deep
def test_deep_suite_in_oracle_venv(tmp_path):
    if not (DEEP_PYTHON.exists() and MARKER.exists()):
        reason = "oracle venv .venv-deep is absent: run tests/deep/build_env.sh .venv-deep"
        if os.environ.get("CI"):
            pytest.fail(reason + " (scripts/test builds it in CI)")
        pytest.skip(reason)
    report = tmp_path / "deep.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [
            str(DEEP_PYTHON),
            "-m",
            "pytest",
            "-c",
            "tests/deep/pytest.ini",
            "tests/deep",
            "-q",
            "-W",
            "ignore::UserWarning",
            f"--junitxml={report}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"deep suite failed (exit {proc.returncode}):\n{tail}"
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, tail
    tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    assert tests >= MIN_TESTS and skipped == 0, f"{tests} deep tests, {skipped} skipped:\n{tail}"


def test_plan_deep_without_the_libraries_says_so_in_one_line():
    """The main venv has no megatron/sglang: `plan --deep`
    still plans, and says why the deep part is absent."""
    import json
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "console.cli", "plan", "--deep", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    deep = json.loads(proc.stdout)["deep"]
    assert deep["available"] is False and deep["findings"] == []
    assert "not importable" in deep["message"] and "\n" not in deep["message"]
    text = subprocess.run(
        [sys.executable, "-m", "console.cli", "plan", "--deep"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert sum("real-library checks skipped" in line for line in text.splitlines()) == 1
