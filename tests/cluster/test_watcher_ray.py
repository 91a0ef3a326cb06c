"""While nobody watches, on the real Ray cluster: a launch starts the run's watcher (a Ray job beside it, no
console open), which sends a loopback webhook receiver (a stdlib HTTP server in this test) one fire and one
clear for the simulated KL spike, one warning for a NaN grad norm the run outlives, and exactly one cause
message when the simulated run dies, within 5 s of the line that says why, while a second webhook that hangs
60 s and then answers 500 delays none of it; the watcher is gone within a minute of the run's end; a console
attached after the failure (the app, then `status` as another operator) shows "since you last looked" with
the cause; the webhook URL is in no argv, job record, log or file the run produced. Killed with SIGKILL, the
watcher is restarted by the next console (the app, attaching), and the ledger loses nothing and repeats
nothing, nor does the receiver.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from loopback_http import QuietHandler, hanging, serve, stop_server
from runhelp import cli, cli_env, job_reaches, launch_when_free, sim_spec, stop_quietly
from waiting import until

from backend.cluster.controller import RunController
from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.incidents import Ledger, ledger_dir
from backend.cluster.watcher import WatcherOptions, watchers_of
from backend.notify_settings import NotifySettings
from backend.settings import Settings

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]

SECRET = "Zq7hook-T0KEN-4d1f"  # the credential part of the webhook URL: it must appear nowhere else
CAUSE_LATENCY_S = 5.0
GONE_WITHIN_S = 60.0
OOM_HINT = "CUDA out of memory"


@dataclass
class Receiver:
    """What the webhook got: (arrival time, body) per POST."""

    got: list[tuple[float, dict[str, object]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kinds(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(str(b["kind"]), str(b.get("alert"))) for _, b in self.got]

    def of(self, kind: str) -> list[tuple[float, dict[str, object]]]:
        with self.lock:
            return [(t, b) for t, b in self.got if b["kind"] == kind]


@pytest.fixture
def hanging_hook() -> Iterator[str]:
    """A webhook that hangs 60 s, then answers 500 (released at the end of the test)."""
    release = threading.Event()
    server = serve(hanging(release))
    server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]  # dropped
    try:
        yield f"http://127.0.0.1:{server.server_port}/hang/{SECRET}"
    finally:
        release.set()
        stop_server(server)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rec = Receiver()

    class Hook(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with rec.lock:
                rec.got.append((time.monotonic(), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = serve(Hook)
    try:
        yield rec, f"http://127.0.0.1:{server.server_port}/hooks/{SECRET}"
    finally:
        stop_server(server)


def _options(address: str, state: Path, url: str, hang: str | None = None) -> WatcherOptions:
    channels = [{"name": "ops", "url": url}] + ([{"name": "hangs", "url": hang}] if hang else [])
    notify = NotifySettings.model_validate(
        {"channels": channels, "clear_hold_s": 1.0, "incident_hold_s": 1.0, "retries": 1, "timeout_s": 60}
    )
    return WatcherOptions(address, state, None, notify)


async def _line_seen(client: RayClient, job_id: str, needle: str, seen: dict[str, float]) -> None:
    """Follow the run's log (as a console would) and note when `needle` first reached it."""
    async for line in client.follow_log(job_id):
        if needle in line and needle not in seen:
            seen[needle] = time.monotonic()


async def _watcher(client: RayClient, run_id: str) -> JobInfo | None:
    found = watchers_of(await client.list_jobs(), run_id)
    return found[-1] if found else None


def _files_holding(root: Path, needle: bytes, skip: Path | None = None) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path == skip or path.is_symlink() or not path.is_file():
            continue
        try:
            if needle in path.read_bytes():
                hits.append(str(path))
        except OSError:
            continue
    return hits


async def test_the_watcher_tells_a_kl_spike_and_the_death_once_with_no_console_open(
    ray_cluster, tmp_path: Path, receiver: tuple[Receiver, str], hanging_hook: str
) -> None:
    rec, url = receiver
    state = tmp_path / "state"
    sim = "--sim-kl-spike-at-rollout 2 --sim-nan-grad-at-step 3 --sim-fail train-oom --sim-fail-at-rollout 4"
    spec = sim_spec(tmp_path, sim=sim)
    seen: dict[str, float] = {}
    options = _options(ray_cluster.address, state, url, hanging_hook)
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        ctl = RunController(client, state_dir=state, watcher=options)
        job = await launch_when_free(ctl, spec)
        follow = asyncio.create_task(_line_seen(client, job.id, OOM_HINT, seen))
        try:
            watcher = await until(None, lambda: _watcher(client, job.id), "the run's watcher job", 30)
            assert watcher.meta.string("ultra_console_watch") == job.id
            extra = watcher.model_extra or {}
            assert not extra.get("entrypoint_num_cpus") and not extra.get("entrypoint_num_gpus")
            run = await job_reaches(client, job.id, timeout=240)
            assert run.status == "FAILED"
            ended = time.monotonic()
            await until(None, lambda: rec.of("cause"), "the cause message", 30)
            gone = await until(
                None,
                lambda: _terminal(client, watcher.id),
                "the watcher to end by itself",
                GONE_WITHIN_S,
                0.5,
            )
            gone_after = time.monotonic() - ended
        finally:
            follow.cancel()
            await stop_quietly(client, job.id)
        jobs = await client.list_jobs()
        logs = [line async for line in client.read_log(job.id)] + [
            line async for line in client.read_log(watcher.id)
        ]
    assert gone.status == "SUCCEEDED", gone.message
    assert gone_after < GONE_WITHIN_S
    kinds = rec.kinds()
    assert kinds.count(("fire", "kl-spike")) == 1 and kinds.count(("clear", "kl-spike")) == 1, kinds
    # the NaN grad norm the run outlived (a skipped step): one warning, never a second death
    assert [(b["alert"], b["severity"]) for _, b in rec.of("incident")] == [("nan", "warning")], kinds
    assert not [k for k in kinds if k[1] == "loss-nonfinite"], kinds
    causes = rec.of("cause")
    assert len(causes) == 1 and not rec.of("end"), kinds
    t_cause, body = causes[0]
    assert body["alert"] is None and "out of memory" in str(body["text"]).lower(), body
    assert body["try"], body  # what to try
    assert OOM_HINT in seen, "the OOM line never reached the run's log"
    latency = t_cause - seen[OOM_HINT]
    print(
        f"\n[watcher] cause message {latency:.2f} s after the line; watcher gone {gone_after:.1f} s after end"
    )
    assert latency < CAUSE_LATENCY_S, f"the cause came {latency:.2f} s after the line"
    # the ledger on the head, and a console that looks afterwards
    entries = Ledger(ledger_dir(state, job.id)).entries()
    assert [e.kind for e in entries if e.alert == "kl-spike"] == ["fire", "clear"]
    assert [e.kind for e in entries].count("cause") == 1
    await _app_shows_since(ray_cluster.address, state, job.id)
    other = {**cli_env(state), "LOGNAME": "night-shift", "USER": "night-shift"}  # another operator
    proc = cli(ray_cluster.address, state, "status", "--job", job.id, env=other)
    assert "since you last looked" in proc.stdout and "cause of death" in proc.stdout, proc.stdout
    again = cli(ray_cluster.address, state, "status", "--job", job.id, env=other)
    assert "since you last looked" not in again.stdout  # per operator: seen now
    # the URL's secret part: nowhere but its setting (the 0600 handover file is gone with the watcher)
    assert not (ledger_dir(state, job.id) / "watcher-config.json").exists()
    shown = json.dumps([j.model_dump(mode="json") for j in jobs])
    assert SECRET not in shown and not [x for x in logs if SECRET in x]
    assert SECRET not in proc.stdout + proc.stderr
    assert _files_holding(tmp_path, SECRET.encode()) == []
    assert _files_holding(ray_cluster.tmp, SECRET.encode()) == []


async def _app_shows_since(address: str, state: Path, job_id: str) -> None:
    """The app attached after the end: 'since you last looked' atop Events, with the cause."""
    from app_helpers import MODELS, RUN_ID, PilotApp
    from textual.widgets import Static

    settings = Settings(address=address, state_dir=state, gpu_probe=False)
    app = PilotApp(settings, job=job_id, watchdog=False, preview_run_id=RUN_ID, model_dir=str(MODELS))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("4")

        def shown() -> str:
            return str(app.query_one("#since", Static).content)

        await until(
            pilot, lambda: "cause of death" in shown(), lambda: f"since-you-last-looked: {shown()!r}", 30
        )
        assert "kl-spike raised" in shown() and "kl-spike cleared" in shown()


async def _console_restarts(
    address: str, state: Path, options: WatcherOptions, client: RayClient, run_id: str, dead: str
) -> JobInfo:
    """Open the app on the run (a writable console): the watcher it starts, once Ray lists it."""
    from app_helpers import MODELS, RUN_ID, PilotApp

    settings = Settings(address=address, state_dir=state, gpu_probe=False, notify=options.notify)
    app = PilotApp(settings, job=run_id, watchdog=False, preview_run_id=RUN_ID, model_dir=str(MODELS))

    async def started() -> JobInfo | None:
        live = [j for j in watchers_of(await client.list_jobs(), run_id) if not j.is_terminal]
        return live[0] if live and live[0].id != dead else None

    async with app.run_test(size=(160, 45)) as pilot:
        return await until(pilot, started, "the console to start the run's next watcher", 60, 0.5)


async def _terminal(client: RayClient, job_id: str) -> JobInfo | None:
    job = await client.get_job(job_id)
    return job if job.is_terminal else None


async def test_a_watcher_killed_with_sigkill_is_restarted_and_loses_nothing(
    ray_cluster, tmp_path: Path, receiver: tuple[Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRA_CONSOLE_WATCHER", "1")  # the app this test opens starts watchers
    rec, url = receiver
    state = tmp_path / "state"
    spec = sim_spec(tmp_path, sim="--sim-kl-spike-at-rollout 2 --sim-forever")
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        options = _options(ray_cluster.address, state, url)
        ctl = RunController(client, state_dir=state, watcher=options)
        job = await launch_when_free(ctl, spec)
        try:
            await until(None, lambda: rec.of("fire"), "the kl-spike fire message", 120, 0.5)
            first = await _watcher(client, job.id)
            assert first is not None
            directory = ledger_dir(state, job.id)
            before = [e.key for e in Ledger(directory).entries()]
            pid = json.loads((directory / "watcher.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            await until(None, lambda: _terminal(client, first.id), "the killed watcher's job to end", 30)
            # a console that attaches now starts the next one (the app, as an operator opens it)
            second = await _console_restarts(ray_cluster.address, state, options, client, job.id, first.id)
            twice = await RunController(client, state_dir=state, watcher=options).start_watcher(job)
            assert twice is not None and not twice.started and twice.job == second.id  # one per run
            await until(None, lambda: rec.of("clear"), "the kl-spike clear message", 120, 0.5)
            await ctl.abort()
            await job_reaches(client, job.id, timeout=60)
            await until(None, lambda: rec.of("end"), "the end message", 60)
            await until(None, lambda: _terminal(client, second.id), "the second watcher to end", 60)
        finally:
            await stop_quietly(client, job.id)
    keys = [e.key for e in Ledger(ledger_dir(state, job.id)).entries()]
    assert keys[: len(before)] == before  # nothing lost
    assert len(keys) == len(set(keys)), keys  # nothing written twice by the second watcher
    assert sum(1 for e in Ledger(ledger_dir(state, job.id)).entries() if e.kind == "watcher") == 2
    kinds = rec.kinds()
    assert kinds.count(("fire", "kl-spike")) == 1 and kinds.count(("clear", "kl-spike")) == 1, kinds
    assert len(rec.of("end")) == 1 and not rec.of("cause"), kinds
    assert "STOPPED" in str(rec.of("end")[0][1]["text"])


async def test_watch_starts_the_watcher_of_a_run_launched_elsewhere(
    ray_cluster, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    """`ultra-console watch --job ID --notify FILE` for a run miles' own launcher submitted (no watcher)."""
    from capture_sim_fail import sim_fail_payload

    rec, url = receiver
    state = tmp_path / "state"
    notify = tmp_path / "notify.toml"
    notify.write_text(f'[[channels]]\nname = "ops"\nurl = "{url}"\n', encoding="utf-8")
    # it dies at rollout 15 (~20 s): the second `watch` must find the run still going (at rollout 1, on a
    # loaded CI runner, it had ended: "not wanted", no watcher named)
    payload = sim_fail_payload("train-oom", "--sim-fail-at-rollout", "15", nodes=1, rollouts=18)
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        sid = await client.submit(payload)
        try:
            first = cli(ray_cluster.address, state, "watch", "--job", sid, "--notify", str(notify), "--json")
            second = cli(ray_cluster.address, state, "watch", "--job", sid, "--notify", str(notify), "--json")
            assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
            one, two = json.loads(first.stdout), json.loads(second.stdout)
            assert one["started"] and one["run"] == sid and one["watcher"]
            assert two == {**one, "started": False}  # the second finds the first
            await job_reaches(client, sid, timeout=180)
            await until(None, lambda: rec.of("cause"), "the cause message", 60)
            await until(None, lambda: _terminal(client, one["watcher"]), "the watcher to end", 60, 0.5)
        finally:
            await stop_quietly(client, sid)
    assert len(rec.of("cause")) == 1 and SECRET not in first.stdout + first.stderr + second.stdout
