"""Starting a run's watcher (backend.cluster.watcher): one per run (found in Ray's job list, or by its lock),
bounded submits, a finished run watched again only when its ledger lacks the end, and the secrets (webhook
URLs, the dashboard token) only in the 0600 settings file, never in the argv, runtime env or metadata
(the job list shows those to anyone)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from backend.cluster import watcher
from backend.cluster.dashboard import JobInfo
from backend.cluster.incidents import Entry, Ledger, ledger_dir
from backend.cluster.watcher_job import CONFIG, forget_config, read_config, take_lock
from backend.errors import SpecError
from backend.notify_settings import NotifySettings, load_notify_file
from backend.settings import load_settings

URL = "http://127.0.0.1:9/hook/T0KEN-s3cr3t-webhook"
TOKEN = "dashboard-t0ken-abcdef"


class FakeRay:
    """The three dashboard calls a start makes; `submitted` keeps every payload."""

    def __init__(self, jobs: list[JobInfo]) -> None:
        self.jobs = jobs
        self.submitted: list[dict[str, Any]] = []

    async def list_jobs(self) -> list[JobInfo]:
        return list(self.jobs)

    async def nodes(self) -> list[object]:
        return [{"node_id": "head1", "is_head_node": True, "state": "ALIVE"}]

    async def submit(self, payload: dict[str, Any]) -> str:
        self.submitted.append(payload)
        sid = str(payload["submission_id"])
        self.jobs.append(
            JobInfo(submission_id=sid, status="PENDING", metadata=payload["metadata"], start_time=_ms())
        )
        return sid


def _ms(ago_s: float = 0.0) -> int:
    return int((time.time() - ago_s) * 1000)


def _run(status: str = "RUNNING", ended_ago_s: float | None = None) -> JobInfo:
    end = _ms(ended_ago_s) if ended_ago_s is not None else None
    return JobInfo(
        submission_id="run-1", status=status, metadata={"ultra_console": "1"}, start_time=_ms(), end_time=end
    )


def _options(tmp: Path) -> watcher.WatcherOptions:
    notify = NotifySettings.model_validate({"channels": [{"name": "ops", "kind": "slack", "url": URL}]})
    return watcher.WatcherOptions("http://127.0.0.1:8265", tmp / "state", TOKEN, notify)


def _start(ray: FakeRay, run: JobInfo, tmp: Path) -> watcher.WatcherStart:
    return asyncio.run(watcher.ensure_watcher(ray, run, _options(tmp)))  # type: ignore[arg-type]


def test_a_start_submits_one_watcher_and_a_second_finds_it(tmp_path: Path) -> None:
    ray = FakeRay([_run()])
    first = _start(ray, ray.jobs[0], tmp_path)
    assert first.started and first.job.startswith(watcher.SUBMISSION_PREFIX)
    second = _start(ray, ray.jobs[0], tmp_path)
    assert not second.started and second.job == first.job and len(ray.submitted) == 1
    payload = ray.submitted[0]
    assert payload["metadata"] == {"ultra_console_watch": "run-1"}
    assert "entrypoint_num_cpus" not in payload and "entrypoint_num_gpus" not in payload
    assert payload["entrypoint_label_selector"] == {"ray.io/node-id": "head1"}
    shown = json.dumps(payload)
    assert "T0KEN" not in shown and TOKEN not in shown  # argv, runtime env, metadata: no secret
    cfg_path = ledger_dir(tmp_path / "state", "run-1") / CONFIG
    assert stat.S_IMODE(cfg_path.stat().st_mode) == 0o600
    cfg = read_config(cfg_path)
    assert cfg.notify.channels[0].url.get_secret_value() == URL and cfg.token is not None
    assert cfg.token.get_secret_value() == TOKEN and cfg.job == "run-1"
    forget_config(cfg_path)
    assert not cfg_path.exists()


def test_a_held_lock_is_a_watcher_and_starts_are_bounded(tmp_path: Path) -> None:
    ray = FakeRay([_run()])
    held = take_lock(ledger_dir(tmp_path / "state", "run-1"))
    assert held is not None
    try:
        assert not _start(ray, ray.jobs[0], tmp_path).started and not ray.submitted
    finally:
        held.close()
    for _ in range(watcher.MAX_STARTS):
        assert _start(ray, ray.jobs[0], tmp_path).started
        ray.jobs[-1] = ray.jobs[-1].model_copy(update={"status": "FAILED"})  # each died at once
    refused = _start(ray, ray.jobs[0], tmp_path)
    assert not refused.started and "starting no more" in refused.text
    assert len(ray.submitted) == watcher.MAX_STARTS


def test_an_ended_run_is_watched_again_only_when_its_ledger_lacks_the_end(tmp_path: Path) -> None:
    recent = _run("FAILED", ended_ago_s=60)
    ray = FakeRay([recent])
    assert _start(ray, recent, tmp_path).started  # the last watcher was killed before the end
    old = FakeRay([_run("FAILED", ended_ago_s=watcher.RESTART_AFTER_END_S + 60)])
    assert not _start(old, old.jobs[0], tmp_path).started and not old.submitted
    Ledger(ledger_dir(tmp_path / "state", "run-1")).add(Entry("cause", "cause", alert="cuda-oom"))
    again = FakeRay([recent])
    told = _start(again, recent, tmp_path)
    assert not told.started and "told its end" in told.text


def test_options_follow_the_switch_and_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ULTRA_CONSOLE_WATCHER", "1")
    assert watcher.options_from(load_settings()) is not None
    assert watcher.options_from(load_settings(readonly=True)) is None
    monkeypatch.setenv("ULTRA_CONSOLE_WATCHER", "0")
    assert watcher.options_from(load_settings()) is None
    assert watcher.options_from(load_settings(), asked=True) is not None


def test_a_notify_file_is_read_and_a_bad_one_is_one_line_without_its_url(tmp_path: Path) -> None:
    good = tmp_path / "n.toml"
    good.write_text(f'clear_hold_s = 2\n[[channels]]\nname = "a"\nkind = "ntfy"\nurl = "{URL}"\n')
    assert load_notify_file(good).channels[0].kind == "ntfy"
    nested = tmp_path / "nested.toml"
    nested.write_text(f'[notify]\n[[notify.channels]]\nurl = "{URL}"\n')
    assert load_notify_file(nested).channels[0].name == "webhook"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[channels]]\nurl = "ftp://T0KEN-s3cr3t@h/x"\n')
    with pytest.raises(SpecError) as err:
        load_notify_file(bad)
    assert "T0KEN" not in str(err.value) and "\n" not in str(err.value)
    assert os.path.exists(bad)


def test_a_readonly_controller_starts_no_watcher_and_a_launch_notice_says_what_it_did(tmp_path: Path) -> None:
    from backend.cluster.controller import RunController

    ray = FakeRay([_run()])
    readonly = RunController(ray, state_dir=tmp_path, readonly=True, watcher=_options(tmp_path))  # type: ignore[arg-type]
    assert asyncio.run(readonly.start_watcher(ray.jobs[0])) is None and not ray.submitted
    ctl = RunController(ray, state_dir=tmp_path, watcher=_options(tmp_path))  # type: ignore[arg-type]
    notices: list[str] = []
    ctl.subscribe(lambda e: notices.append(e.text) if e.kind == "notice" else None)
    started = asyncio.run(ctl.start_watcher(ray.jobs[0]))
    assert started is not None and started.started and notices == [started.text]
    assert asyncio.run(ctl.start_watcher(ray.jobs[0])) is not None and len(notices) == 1  # found: quiet


def test_two_runs_never_share_a_watcher(tmp_path: Path) -> None:
    ray = FakeRay([_run(), _run().model_copy(update={"submission_id": "run-2"})])
    first, second = (_start(ray, run, tmp_path) for run in list(ray.jobs))
    assert first.started and second.started and first.job != second.job
    assert [p["metadata"]["ultra_console_watch"] for p in ray.submitted] == ["run-1", "run-2"]
    for run in ("run-1", "run-2"):
        assert read_config(ledger_dir(tmp_path / "state", run) / CONFIG).job == run


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--readonly", "watch", "--job", "run-1"], "watch refused: the console is read-only"),
        (["watch", "--job", "run-1", "--notify", "missing.toml"], "cannot read notify file"),
        (["watch", "--job", "run-1"], "Ray dashboard unreachable at http://127.0.0.1:1"),
    ],
)
def test_the_watch_command_says_what_is_wrong_in_one_line(
    argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from console.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = main(["--address", "http://127.0.0.1:1", *argv])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and expected in err, err
