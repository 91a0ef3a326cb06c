"""Hostile input, round 3 (issue 36), JSON nested past the stack: `json.loads` raises RecursionError (not a
ValueError) on 100,000 nested arrays. A job's metadata (a hostile dashboard), a flight-recorder dump or a
GPU stream line (a training script), an audit or ledger line (a file) holding one is one line or skipped,
never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.cluster import flight_recorder, miles_gpu_streams, resume
from backend.cluster.audit import BadAuditLine, parse_entry
from backend.cluster.dashboard import JobInfo
from backend.cluster.incidents import LEDGER, Ledger
from backend.errors import ConsoleError

DEEP = '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"


def test_a_deeply_nested_spec_in_a_jobs_metadata_falls_back_to_its_argv() -> None:
    job = JobInfo.model_validate(
        {"submission_id": "j", "entrypoint": "python3 /root/miles/train.py", "metadata": {"spec": DEEP}}
    )
    assert resume.run_plan(job).source == "argv"


def test_a_deeply_nested_flight_recorder_dump_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_text(DEEP)
    with pytest.raises(ConsoleError, match="nested too deeply") as err:
        flight_recorder.read_dump(tmp_path / "rank_0")
    assert "\n" not in str(err.value)
    dumps, bad = flight_recorder.read_dir(tmp_path)
    assert dumps == [] and bad[0][0] == "rank_0"


def test_deeply_nested_audit_ledger_and_stream_lines_are_skipped(tmp_path: Path) -> None:
    with pytest.raises(BadAuditLine):
        parse_entry(DEEP)
    assert miles_gpu_streams.parse_sample(DEEP) is None
    (tmp_path / LEDGER).write_text(DEEP[:8000] + "\n")
    (tmp_path / LEDGER).chmod(0o600)
    tmp_path.chmod(0o700)
    assert Ledger(tmp_path).entries() == []
