"""The audit log: one JSON line per action, secrets never written, readable back after a torn write."""

from __future__ import annotations

import json
import stat

from backend.cluster.audit import AuditLog, scrub
from backend.plan.spec import build_spec
from backend.plan.submission import build_submission


def test_launch_entry_has_every_field_and_no_secret(tmp_path) -> None:
    spec = build_spec("nemotron-3-ultra-550b-a55b-4layer", ['run.extra_env={HF_TOKEN = "hf_supersecret"}'])
    secret = "wandb-0123456789abcdef"
    sub = build_submission(spec, run_id="261130-060000-001", secrets={"WANDB_API_KEY": secret}, nvlink=False)
    log = AuditLog(tmp_path / "state")
    log.record(
        "launch",
        job=sub.submission_id,
        command=sub.shell() + f" --wandb-key {secret}",
        result="submitted",
        details={"runtime_env": sub.runtime_env},
        secrets={"WANDB_API_KEY": secret},
    )
    text = (tmp_path / "state" / "audit.jsonl").read_text()
    assert secret not in text and "hf_supersecret" not in text
    (entry,) = [json.loads(line) for line in text.splitlines()]
    assert set(entry) == {"time", "user", "action", "job", "command", "result", "details"}
    assert entry["action"] == "launch" and entry["job"] == "ultra-console-261130-060000-001"
    assert entry["command"].startswith("ray job submit") and "train.py" in entry["command"]
    assert entry["details"]["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "***"
    assert entry["time"].endswith("+00:00")
    mode = stat.S_IMODE((tmp_path / "state" / "audit.jsonl").stat().st_mode)
    assert mode == 0o600


def test_entries_append_in_order_and_skip_torn_line(tmp_path) -> None:
    log = AuditLog(tmp_path)
    log.record("launch", job="a", result="submitted")
    log.record("abort", job="a", result="STOPPED")
    with open(log.path, "a") as fh:
        fh.write('{"time": "2026-11-30T06:0')  # a console killed mid-write
    log.record("cleanup", job="a", result="killed 2")
    read = log.read()
    assert [e.action for e in read.entries] == ["launch", "abort", "cleanup"]  # the torn line skipped
    assert read.note == "1 unreadable line(s) of audit.jsonl skipped: line 3: not JSON (a write cut short?)"
    assert AuditLog(tmp_path / "none").entries() == ()


def test_a_line_that_is_no_entry_is_skipped_with_a_one_line_note(tmp_path) -> None:
    """Typed entries: a hand-edited or foreign line is named once, not shown as a row of blanks."""
    log = AuditLog(tmp_path)
    log.record("launch", job="a", result="submitted", details={"footprint": {"nodes": ["n1"]}})
    with open(log.path, "a") as fh:
        fh.write(
            '[1, 2]\n{"time": "t", "user": "u", "action": 3, "job": null, "command": "", "result": ""}\n\n'
        )
    log.record("abort", job="a", result="STOPPED")
    read = log.read()
    assert [(e.action, e.job) for e in read.entries] == [("launch", "a"), ("abort", "a")]
    assert read.entries[0].details == {"footprint": {"nodes": ["n1"]}}
    assert read.note == ("2 unreadable line(s) of audit.jsonl skipped: line 2: not a JSON object (+1 more)")
    assert "\n" not in read.note
    assert log.read(limit=1).entries == read.entries[-1:]  # the last line only


def test_scrub_tokens_and_secret_pairs() -> None:
    text = "curl -H 'Authorization: Bearer abc123' --token xyz RAY_AUTH_TOKEN=sekrit MY_VAR=42"
    out = scrub(text)
    for bad in ("abc123", "xyz", "sekrit"):
        assert bad not in out
    assert "MY_VAR=42" in out
