"""A run's watcher: a Ray job on the head that reads the run like a console would, while nobody watches.

Why a job: the run lives in Ray, so does its watcher; no console has to stay open for a 3 am death to reach
someone. It reserves nothing (no entrypoint resources: Ray pins it to the head and holds no CPU or GPU for
it) and talks to the dashboard over HTTP like the console (backend.cluster.dashboard), so it needs no
`ray` import. What it reads goes through the console's own backend: the job's log into a RunMonitor (the
same alert rules and failure catalog), miles' `--dump-details` files where the entrypoint names them, the
job's status. What that raises and clears goes into the run's ledger (backend.cluster.incidents) and, paced
(backend.cluster.notify), to the webhooks of its settings.

One per run: it holds `watcher.lock` in the ledger directory (a second one says so and ends). It re-reads
the log from its first line, so after a SIGKILL the next one (started by the next console) writes what the
ledger lacks and sends what was not sent (`notified.jsonl`). It ends by itself once the run has ended, its
log is drained and its last message is sent (or `CLOSE_S` passed).

`python -m backend.cluster.watcher_job --config FILE`: FILE (0600, written by the console) holds the run's
id, the dashboard address and token and the notification settings; no secret is ever on its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from backend.cluster.dashboard import JobInfo, JobNotFound, RayClient
from backend.cluster.incidents import WATCHER_CONFIG, WATCHER_LOCK, Entry, Ledger
from backend.cluster.notify import Message, MessageKind, Notifier, Pacer
from backend.cluster.status_report import failure_reason
from backend.errors import ConsoleError
from backend.notify_settings import NotifySettings
from backend.redaction import public_line, remember
from backend.safe_paths import UnsafePath, exclusive_lock, read_private_tail, write_private
from backend.sanitize import sanitize_text
from backend.severity import Severity
from backend.signals.alerts import Alert
from backend.signals.ingest import LIVE_FLUSH_S, text_chunks
from backend.signals.monitor import RunMonitor
from backend.signals.structured import dump_dir_of
from shim.package import carries_shim

MARK = "ULTRA_CONSOLE_WATCH "
LOCK = WATCHER_LOCK
STATUS = "watcher.json"
NOTIFIED = "notified.jsonl"
NOTIFIED_LIMIT = 8 << 20
CONFIG = WATCHER_CONFIG  # written 0600 by the console (backend.cluster.watcher); removed at the end
CLOSE_S = 30.0  # the last messages get this long; the watcher is gone well within a minute of the end
HELD_RULES = ("job_failed", "node_dead")  # like a catalog failure: part of the cause when the run dies
# Alert rules whose event a failure-catalog kind names too (`nonfinite`: the catalog's `nan`, which knows a
# skipped step from a divergence): the ledger keeps their fire and clear, the message is the catalog's.
CATALOG_COVERED = ("nonfinite",)
_END_SEVERITY = {"FAILED": Severity.CRITICAL, "STOPPED": Severity.WARNING}


class WatchConfig(BaseModel):
    """What the console hands its watcher (the 0600 file)."""

    model_config = ConfigDict(extra="forbid")

    job: str
    address: str
    token: SecretStr | None = None
    ledger_dir: Path
    notify: NotifySettings = NotifySettings()
    poll_s: float = 1.0
    drain_s: float = 3.0  # after the end, the log's last lines get this long to arrive
    quiet_s: float = 0.8  # ...and no longer once the log has been quiet this long (the cause goes out sooner)


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(MARK + json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def read_config(path: Path) -> WatchConfig:
    """The config file, refused when others may read it (it holds secrets)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO there never blocks the open
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode) or mode & 0o077:
            raise ConsoleError(f"watcher config {path} must be a regular file only its owner reads (0600)")
        data = json.loads(handle.read(1 << 20))
    try:
        cfg = WatchConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise ConsoleError(f"bad watcher config {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    remember(cfg.token.get_secret_value() if cfg.token else None)
    return cfg


def take_lock(directory: Path) -> IO[bytes] | None:
    """The run's watcher lock (held while it runs), or None when another watcher holds it."""
    return exclusive_lock(directory, LOCK)


def read_notified(directory: Path) -> set[str]:
    """The keys already sent (its last NOTIFIED_LIMIT bytes; a link, a FIFO or /dev/zero there is none)."""
    with contextlib.suppress(OSError, UnsafePath):
        data, _ = read_private_tail(directory, NOTIFIED, NOTIFIED_LIMIT)
        return {line.strip() for line in data.decode("utf-8", "replace").splitlines() if line}
    return set()


class Watcher:
    """Reads one run into the ledger and the notifier until it ends."""

    def __init__(self, cfg: WatchConfig, notifier: Notifier | None = None) -> None:
        self.cfg = cfg
        self.ledger = Ledger(cfg.ledger_dir)
        self.notifier = notifier or Notifier(cfg.notify, on_failure=self._failed)
        self.pacer = Pacer(cfg.notify, self._enqueue, read_notified(cfg.ledger_dir))
        self.monitor = RunMonitor()
        engine = self.monitor.alerts
        self._catalog = {k.id for k in engine.failures.catalog.kinds}
        self._held = self._catalog | {r.id for r in engine.rules if r.when in HELD_RULES}
        self._covered = {r.id for r in engine.rules if r.when in CATALOG_COVERED}
        self._counts: dict[tuple[str, str], int] = {}
        self._fed_at = 0.0  # when the log last gave text
        self._episodes: dict[int, tuple[Alert, str]] = {}  # id(alert) -> (alert, episode key)
        engine.subscribe(self._on_fire)
        engine.subscribe_clears(self._on_clear)

    # ------------------------------------------------------------------ what happened
    def _message(self, kind: MessageKind, key: str, alert: Alert, text: str, title: str) -> Message:
        return Message(
            kind, key, self.cfg.job, alert.severity, title, text, alert.id, alert.sample, alert.advice
        )

    def _on_fire(self, alert: Alert) -> None:
        n = self._counts[(alert.id, alert.key or "")] = self._counts.get((alert.id, alert.key or ""), 0) + 1
        episode = f"{alert.id}|{alert.key or ''}|{n}"
        held = alert.id in self._held
        kind: MessageKind = "incident" if held else "fire"
        key = f"{kind}:{episode}"
        self.ledger.add(
            Entry(
                kind,
                key,
                alert=alert.id,
                severity=alert.severity.value,
                message=alert.message,
                line=alert.sample,
                step=alert.step,
                try_=alert.advice,
            )
        )
        if held:
            msg = self._message(kind, key, alert, alert.message, f"incident {alert.id}")
            self.pacer.incident(
                Message(
                    kind, key, msg.run, Severity.WARNING, msg.title, msg.text, alert.id, msg.line, msg.try_
                ),
                time.monotonic(),
                needs_progress=alert.id in self._catalog,
            )
        else:
            self._episodes[id(alert)] = (alert, episode)
            if alert.id in self._covered:
                return  # the catalog's message says it
            self.pacer.fire(
                f"{alert.id}|{alert.key or ''}",
                self._message(kind, key, alert, alert.message, f"{alert.id} fired"),
            )

    def _on_clear(self, alert: Alert) -> None:
        found = self._episodes.pop(id(alert), None)
        if found is None:
            return
        episode = found[1]
        step = f" (last at step {alert.last_step:g})" if isinstance(alert.last_step, float | int) else ""
        text = f"{alert.id} cleared{step} after {alert.count} point(s): {alert.message}"
        key = f"clear:{episode}"
        self.ledger.add(
            Entry(
                "clear",
                key,
                alert=alert.id,
                severity=alert.severity.value,
                message=text,
                step=alert.last_step,
            )
        )
        if alert.id in self._covered:
            return
        self.pacer.clear(
            f"{alert.id}|{alert.key or ''}",
            self._message("clear", key, alert, text, f"{alert.id} cleared"),
            time.monotonic(),
        )

    def _enqueue(self, msg: Message) -> None:
        with contextlib.suppress(OSError, UnsafePath):  # the ledger, not this list, is what must not be lost
            write_private(self.cfg.ledger_dir, NOTIFIED, (msg.key + "\n").encode(), append=True)
        self.notifier.send(msg)

    def _failed(self, why: str, msg: Message) -> None:
        """A message no retry delivered: the ledger says so (one entry per message and channel)."""
        with contextlib.suppress(OSError):
            self.ledger.add(
                Entry(
                    "notify-failed",
                    f"notify-failed:{why.split(':')[0]}:{msg.key}",
                    alert=msg.alert or "",
                    message=public_line(why),
                )
            )

    def finish(self, job: JobInfo) -> Message:
        """The run ended: its cause (when the log names one for a FAILED job) or its end, in the ledger and
        as the last message."""
        status = job.status
        found = self.monitor.diagnosis() if status == "FAILED" else None
        if found is not None:
            c = found.cause
            text = c.headline
            entry = Entry(
                "cause",
                "cause",
                alert=c.id,
                severity=Severity.CRITICAL.value,
                message=text,
                line=c.line,
                try_=c.try_,
            )
            msg = Message(
                "cause",
                "cause",
                self.cfg.job,
                Severity.CRITICAL,
                f"run FAILED: {c.title}",
                text,
                None,
                c.line,
                c.try_,
            )
        else:
            first = (job.message or "").splitlines()[0] if job.message else ""
            reason = failure_reason(job) or first
            text = f"run ended {status}" + (f": {reason}" if reason else "")
            severity = _END_SEVERITY.get(status, Severity.INFO)
            entry = Entry("end", "end", severity=severity.value, message=text)
            msg = Message("end", "end", self.cfg.job, severity, f"run {status}", text)
        self.ledger.add(entry)
        self.pacer.finish(msg, died=status == "FAILED")
        return msg

    # ------------------------------------------------------------------ reading
    def feed(self, text: str) -> None:
        self._fed_at = time.monotonic()
        with self.monitor.lock:
            self.monitor.feed_text(sanitize_text(text))
            self._note_outlived()
        self.pacer.tick(time.monotonic())

    def _note_outlived(self) -> None:
        """The catalog's failures the run went on after (only those are worth a warning of their own)."""
        if self.pacer.holds_incidents:
            self.pacer.outlived = {i.finding.id for i in self.monitor.incidents()}

    async def _follow(self, client: RayClient, job: JobInfo) -> None:
        """The whole log, then live, into the monitor; a dropped follow is resumed (from the start: the
        monitor is new, the ledger's keys keep what was written)."""
        async for chunk in text_chunks(client.follow_log(job.id), max_lines=2000, flush_s=LIVE_FLUSH_S):
            self.feed(chunk.text)

    def _tick(self) -> None:
        self.monitor.poll_dump()
        self.monitor.tick()
        self.pacer.tick(time.monotonic())

    async def _drain(self, follow: asyncio.Task[None]) -> None:
        """After the end: the log's last lines, until its follow ends, it has been quiet `quiet_s` since the
        end was seen and since its last text, or `drain_s` passed."""
        start = time.monotonic()
        deadline = start + self.cfg.drain_s
        while not follow.done() and time.monotonic() < deadline:
            if time.monotonic() - max(self._fed_at, start) >= self.cfg.quiet_s:
                return
            await asyncio.wait({follow}, timeout=0.1)

    async def run(self, client: RayClient) -> Message:
        job = await client.get_job(self.cfg.job)
        self.monitor.facts.scan_text(" " + (job.entrypoint or ""))
        self.monitor.expect_shim(carries_shim(job.runtime_env))
        dump = dump_dir_of(job.entrypoint or "")
        if dump:
            self.monitor.attach_dump(dump, wait=True)
        follow = asyncio.create_task(self._follow(client, job))
        try:
            while not job.is_terminal:
                await asyncio.sleep(self.cfg.poll_s)
                try:
                    job = await client.get_job(self.cfg.job)
                except JobNotFound:
                    break
                except ConsoleError:
                    continue  # the dashboard is away for a moment: keep what we have
                self.monitor.on_job_status(job.status, job.message)
                self._tick()
            await self._drain(follow)
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConsoleError):
                await follow
        self.monitor.input_ended()
        self._tick()
        return self.finish(job)


async def watch(cfg: WatchConfig) -> str:
    watcher = Watcher(cfg)
    watcher.ledger.add(
        Entry(
            "watcher",
            f"watcher:{os.getpid()}:{time.time():.3f}",
            message=f"watching run {cfg.job} (pid {os.getpid()})",
        )
    )
    token = cfg.token.get_secret_value() if cfg.token else None
    try:
        async with RayClient(cfg.address, token, timeout=30.0) as client:
            last = await watcher.run(client)
    finally:
        watcher.notifier.close(CLOSE_S)
    return last.text


def forget_config(path: Path) -> None:
    """The run ended and its last message went: its settings file (webhook URLs, the token) goes too, so
    the secrets stay only in the operator's own config."""
    if path.name == CONFIG:
        with contextlib.suppress(OSError):
            path.unlink()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ultra-console-watcher")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        cfg = read_config(args.config)
    except (OSError, ValueError, ConsoleError) as err:
        emit({"k": "bye", "why": public_line(f"cannot read the watcher config: {err}")})
        return 2
    try:
        lock = take_lock(cfg.ledger_dir)
    except (OSError, UnsafePath) as err:
        emit({"k": "bye", "why": public_line(f"cannot lock the run's watcher directory: {err}")})
        return 2
    if lock is None:
        emit({"k": "duplicate", "why": f"another watcher holds run {cfg.job}'s lock"})
        return 0
    status = {"pid": os.getpid(), "job": cfg.job, "started": time.time()}
    write_private(cfg.ledger_dir, STATUS, json.dumps(status).encode())
    emit({"k": "hello", **status})
    try:
        why = asyncio.run(watch(cfg))
    except ConsoleError as err:
        emit({"k": "bye", "why": public_line(str(err))})
        return 1
    forget_config(args.config)
    emit({"k": "bye", "why": public_line(why)})
    lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
