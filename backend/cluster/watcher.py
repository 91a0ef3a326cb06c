"""The console's side of a run's watcher (backend/cluster/watcher_job.py): find it, or start it.

Who starts one: every launch (RunController.launch), a writable console attaching to a run, and
`ultra-console watch --job ID` for a run launched elsewhere. A `--readonly` console never does. One per
run: a start first looks for a live watcher of the run in Ray's job list (metadata `WATCH_KEY` = the run's
id), then for the watcher lock in the run's ledger directory (held by a watcher Ray does not list yet); two
consoles racing past both submit two jobs, and the second one finds the lock and ends at once.

Bounded: Ray's job list keeps every watcher of the run, finished ones too, so at most `MAX_STARTS` are
submitted per run in `START_WINDOW_S` by all consoles together (a watcher that keeps dying is not
resubmitted forever). A run that ended is watched again only when its ledger lacks its end and it ended
within `RESTART_AFTER_END_S` (a watcher SIGKILLed before its last message): a console opened on a
week-old run sends nobody a stale death.

Like the GPU probe it reserves nothing (no entrypoint resources) and is pinned to the head, where the
console's state directory is. Its settings, with the webhook URLs and the dashboard token, travel in a
0600 file in the run's ledger directory (`WATCHER_CONFIG`), never on its command line or in its runtime
env (which Ray's job list shows to anyone); the watcher deletes that file once the run ended and its last
message went.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.incidents import WATCHER_CONFIG, WATCHER_LOCK, Ledger, ledger_dir, safe_name
from backend.cluster.job_identity import WATCH_KEY, job_kind
from backend.cluster.node_job import REPO_ROOT
from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.notify_settings import NotifySettings
from backend.safe_paths import UnsafePath, exclusive_lock, write_private
from backend.settings import Settings

SUBMISSION_PREFIX = "ultra-console-watch-"
MAX_STARTS, START_WINDOW_S = 4, 3600.0
RESTART_AFTER_END_S = 3600.0
_ENDED_KINDS = ("end", "cause")


@dataclass(frozen=True)
class WatcherOptions:
    """What a console hands a watcher it starts: where the dashboard is, where the ledger goes, where to
    send word. `token` and the channels' URLs are secrets (written only to the 0600 file)."""

    address: str
    state_dir: Path
    token: str | None = None
    notify: NotifySettings = field(default_factory=NotifySettings)
    poll_s: float = 1.0


@dataclass(frozen=True)
class WatcherStart:
    """What a start did: `job` the watcher's submission id ('' when none runs), `started` whether this
    call submitted it, `text` one line for the operator."""

    job: str
    started: bool
    text: str


def watchers_of(jobs: Iterable[JobInfo], run_id: str) -> list[JobInfo]:
    """Every watcher job of `run_id` in Ray's job list, oldest first."""
    mine = [j for j in jobs if job_kind(j) == "watch" and j.meta.string(WATCH_KEY) == run_id]
    return sorted(mine, key=lambda j: j.start_time or 0)


def ended_in_ledger(directory: Path) -> bool:
    """Whether the run's ledger already holds its end (or its cause): a watcher saw it through."""
    return any(e.kind in _ENDED_KINDS for e in Ledger(directory).entries())


def not_wanted(run: JobInfo, directory: Path, now_s: float) -> str | None:
    """Why `run` needs no watcher now (None: it does)."""
    if not run.is_terminal:
        return None
    if ended_in_ledger(directory):
        return f"run {run.id} ended {run.status}; its watcher told its end"
    ended = (run.end_time or 0) / 1000.0
    if now_s - ended > RESTART_AFTER_END_S:
        return f"run {run.id} ended {run.status} over {RESTART_AFTER_END_S / 3600:g} h ago: no watcher"
    return None


def config_json(run_id: str, directory: Path, options: WatcherOptions) -> bytes:
    """The watcher's settings file (secrets in clear: it is written 0600 and read by the watcher only)."""
    notify = options.notify.model_dump(mode="json")
    notify["channels"] = [
        {**c.model_dump(mode="json"), "url": c.url.get_secret_value()} for c in options.notify.channels
    ]
    data = {
        "job": run_id,
        "address": options.address,
        "token": options.token,
        "ledger_dir": str(directory),
        "notify": notify,
        "poll_s": options.poll_s,
    }
    return json.dumps(data).encode()


def watcher_submission(
    run_id: str, config: Path, head_node_id: str, python: str = sys.executable
) -> dict[str, object]:
    """The Ray job of a watcher: this console's interpreter and code, pinned to the head, no resources."""
    argv = [python, "-m", "backend.cluster.watcher_job", "--config", str(config)]
    return {
        "entrypoint": shlex.join(argv),
        "submission_id": f"{SUBMISSION_PREFIX}{safe_name(run_id, limit=80)}-{int(time.time() * 1000)}",
        "metadata": {WATCH_KEY: run_id},
        "runtime_env": {"env_vars": {"PYTHONPATH": str(REPO_ROOT)}},
        "entrypoint_label_selector": {"ray.io/node-id": head_node_id},
    }


def lock_held(directory: Path) -> bool:
    """Whether a watcher holds the run's lock right now (one Ray has not listed yet, or listed elsewhere)."""
    try:
        handle = exclusive_lock(directory, WATCHER_LOCK)
    except (OSError, UnsafePath):
        return False
    if handle is None:
        return True
    handle.close()
    return False


async def _head_node(client: RayClient) -> str:
    nodes = map(Fields.of, await client.nodes())
    head = next(
        (n.text("node_id") for n in nodes if n.has("is_head_node") and n.value("state") == "ALIVE"), None
    )
    if head is None:
        raise ConsoleError("no alive head node to run the watcher on")
    return head


def _too_many_starts(run: JobInfo, mine: list[JobInfo]) -> str | None:
    """Why no watcher starts when so many started lately and none kept running (None: one may)."""
    now_ms = time.time() * 1000
    recent = [j for j in mine if now_ms - (j.start_time or now_ms) < START_WINDOW_S * 1000]
    if len(recent) < MAX_STARTS:
        return None
    return (
        f"run {run.id}: {len(recent)} watchers started in the last {START_WINDOW_S / 60:.0f} min "
        "and none kept running: starting no more"
    )


def _write_config(run: JobInfo, directory: Path, options: WatcherOptions) -> None:
    """The watcher's settings, private, in the run's ledger directory."""
    try:
        write_private(directory, WATCHER_CONFIG, config_json(run.id, directory, options))
    except (OSError, UnsafePath) as err:
        raise ConsoleError(f"cannot write the watcher's settings in {directory}: {err}") from None


async def ensure_watcher(client: RayClient, run: JobInfo, options: WatcherOptions) -> WatcherStart:
    """The run's watcher: the one that runs, else a new one (when the run wants one and the bound allows)."""
    directory = ledger_dir(options.state_dir, run.id)
    mine = watchers_of(await client.list_jobs(), run.id)
    live = [j for j in mine if not j.is_terminal]
    if live:
        return WatcherStart(live[0].id, False, f"run {run.id} is watched by {live[0].id}")
    why = not_wanted(run, directory, time.time())
    if why is not None:
        return WatcherStart("", False, why)
    if lock_held(directory):
        return WatcherStart("", False, f"run {run.id} is watched (its watcher holds the lock)")
    too_many = _too_many_starts(run, mine)
    if too_many is not None:
        return WatcherStart("", False, too_many)
    head = await _head_node(client)
    _write_config(run, directory, options)
    sid = await client.submit(watcher_submission(run.id, directory / WATCHER_CONFIG, head))
    channels = len(options.notify.channels)
    return WatcherStart(sid, True, f"watcher {sid} started for run {run.id} ({channels} channel(s))")


def options_from(settings: Settings, *, asked: bool = False) -> WatcherOptions | None:
    """The watcher options of a console with `settings` (None: it starts no watcher: read-only, or off
    unless `asked`, as `ultra-console watch` asks)."""
    if settings.readonly or not (settings.watcher or asked):
        return None
    return WatcherOptions(settings.address, Path(settings.state_dir), settings.token_text(), settings.notify)
