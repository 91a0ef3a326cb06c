"""The watcher's messages to webhooks: what is said (fire, clear, incident, cause, end), how each kind of
channel wants it, and a sender per channel that never holds up the reading.

Each channel has its own daemon thread, bounded queue, rate limit and retries with backoff; `Sender.put`
never blocks (a full queue drops the message and counts it), so a webhook that hangs, redirects (never
followed: a redirect is a misconfigured URL, and following it could hand the payload elsewhere), answers
500 or cannot be reached costs that channel's thread its time and nothing else. Every attempt is bounded
(`httpx` timeouts); errors are reported in words that never hold the URL (backend.redaction).

`Pacer` decides what is sent at all: one message per alert id and episode (dedup), a clear only once the
alert stayed clear `clear_hold_s` (hysteresis: a re-fire inside it cancels the clear and sends nothing), an
incident only once the run outlived it by `incident_hold_s` (else it is part of the cause message); a
failure of the catalog only once the run also made progress after it (`outlived`: the monitor's incidents,
new train steps or evals after the line), so what a dying run prints on its way down is never a warning.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import httpx

from backend.notify_settings import NotifySettings, WebhookChannel
from backend.redaction import public_line
from backend.severity import Severity

MessageKind = Literal["fire", "clear", "incident", "cause", "end"]
USER_AGENT = "ultra-console-watcher"
_ICON = {Severity.CRITICAL: "🔴", Severity.ERROR: "🔴", Severity.WARNING: "🟠", Severity.INFO: "🔵"}
_NTFY_PRIORITY = {Severity.CRITICAL: "urgent", Severity.ERROR: "high", Severity.WARNING: "high"}


@dataclass(frozen=True)
class Message:
    """One notification about one run."""

    kind: MessageKind
    key: str  # the dedup id (the ledger's key of what it reports)
    run: str
    severity: Severity
    title: str
    text: str
    alert: str | None = None  # None for the cause and the end (every channel's alert list admits them)
    line: str = ""
    try_: str = ""
    t: float = field(default_factory=time.time)

    def headline(self) -> str:
        return public_line(f"{self.title} — run {self.run}")

    def body(self) -> str:
        parts = [self.text]
        if self.try_:
            parts.append(f"try: {self.try_}")
        if self.line:
            parts.append(f"line: {self.line}")
        return "\n".join(public_line(p) for p in parts)


def payload(channel: WebhookChannel, msg: Message) -> tuple[dict[str, str], bytes | None, object]:
    """(headers, raw body, JSON body) of `msg` as `channel` wants it."""
    if channel.kind == "ntfy":
        headers = {
            "Title": msg.headline().encode("ascii", "replace").decode(),
            "Priority": _NTFY_PRIORITY.get(msg.severity, "default"),
            "Tags": f"{msg.severity.value},{msg.kind}",
        }
        return headers, msg.body().encode(), None
    if channel.kind == "slack":
        return {}, None, _slack(msg)
    return (
        {},
        None,
        {
            "kind": msg.kind,
            "run": public_line(msg.run),
            "severity": msg.severity.value,
            "alert": msg.alert,
            "title": public_line(msg.title),
            "text": public_line(msg.text),
            "try": public_line(msg.try_),
            "line": public_line(msg.line),
            "key": public_line(msg.key),
            "time": msg.t,
        },
    )


def slack_escaped(text: str) -> str:
    """Text as Slack shows it literally: `<!channel>`, `<@U1>` and `<https://x|label>` in a log line stay
    text (no ping of everyone, no forged link); Slack's own rule, `&`, `<`, `>` as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(msg: Message) -> dict[str, object]:
    """A Slack-compatible body: every piece from the run (its log, its id) escaped before mrkdwn sees it."""
    head = slack_escaped(msg.headline())
    context = slack_escaped(public_line(f"{msg.kind} · {msg.severity.value} · {msg.key}"))
    blocks: list[dict[str, object]] = [
        {"type": "header", "text": {"type": "plain_text", "text": msg.headline()[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": slack_escaped(msg.body()[:2900])[:2990]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
    ]
    text = f"{_ICON.get(msg.severity, '')} {head}: {slack_escaped(public_line(msg.text))}"
    return {"text": text, "blocks": blocks}


class Sender:
    """One channel's thread: a bounded queue, a rate limit, retries with backoff, bounded attempts."""

    def __init__(
        self,
        channel: WebhookChannel,
        settings: NotifySettings,
        on_failure: Callable[[str, Message], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.channel = channel
        self.settings = settings
        self.on_failure = on_failure
        self.queue: queue.Queue[Message | None] = queue.Queue(maxsize=settings.queue_size)
        self.dropped = 0
        self.sent: list[str] = []  # keys delivered, in order
        self.failed: list[str] = []
        self._times: deque[float] = deque()
        self._stop = threading.Event()
        timeout = httpx.Timeout(settings.timeout_s, connect=min(settings.timeout_s, 5.0))
        self._http = httpx.Client(
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT},
            transport=transport,
        )
        self._thread = threading.Thread(target=self._run, name=f"notify-{channel.name}", daemon=True)
        self._thread.start()

    def put(self, msg: Message) -> bool:
        """Queue `msg` (never blocks); False when the queue was full (the message is dropped, counted)."""
        try:
            self.queue.put_nowait(msg)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def close(self, timeout_s: float) -> None:
        """Send what is queued within `timeout_s`, then stop (a hung attempt is abandoned with its thread)."""
        with contextlib.suppress(queue.Full):
            self.queue.put(None, timeout=0.1)
        self._thread.join(timeout_s)
        self._stop.set()
        if not self._thread.is_alive():
            self._http.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.queue.get()
            if msg is None:
                return
            self._pace()
            error = self._deliver(msg)
            if error is None:
                self.sent.append(msg.key)
            else:
                self.failed.append(msg.key)
                if self.on_failure is not None:
                    self.on_failure(f"{self.channel.name}: {error}", msg)

    def _pace(self) -> None:
        """At most `rate_per_min` messages in any minute: wait for the oldest to age out."""
        now = time.monotonic()
        while self._times and now - self._times[0] > 60.0:
            self._times.popleft()
        if len(self._times) >= self.settings.rate_per_min:
            self._stop.wait(max(0.0, 60.0 - (now - self._times[0])))
            self._times.popleft()
        self._times.append(time.monotonic())

    def _deliver(self, msg: Message) -> str | None:
        """POST `msg`, retried with backoff on a failure a retry can mend; None when delivered, else why."""
        headers, raw, body = payload(self.channel, msg)
        url = self.channel.url.get_secret_value()
        delay = self.settings.backoff_s
        why = "not sent"
        for attempt in range(self.settings.retries + 1):
            if attempt:
                if self._stop.wait(delay):
                    return why
                delay *= 2
            try:
                resp = self._http.post(url, headers=headers, content=raw, json=body)
            except httpx.HTTPError as err:
                why = f"{type(err).__name__}: {public_line(str(err))}"[:300]
                continue
            if resp.is_success:
                return None
            if resp.is_redirect:
                return f"HTTP {resp.status_code}: the webhook redirects (not followed); fix its URL"
            why = f"HTTP {resp.status_code}"
            if resp.status_code < 500 and resp.status_code != 429:
                return why  # a refusal a retry will not change
        return why


@dataclass
class _Open:
    """An alert the pacer told about, and its pending clear (when it went clear, if it did)."""

    fired: Message
    cleared_at: float | None = None
    clear: Message | None = None


class Pacer:
    """What the watcher reports becomes at most one message per alert episode and channel rules."""

    def __init__(self, settings: NotifySettings, send: Callable[[Message], None], sent: set[str]) -> None:
        self.settings = settings
        self._send = send
        self.sent = sent  # keys already sent (the watcher's earlier lives included)
        self._open: dict[str, _Open] = {}  # alert id + key -> its open episode
        self._incidents: dict[str, tuple[float, Message]] = {}  # alert id -> (seen at, message)
        self._needs_progress: set[str] = set()  # incidents said only once `outlived` names them
        self.outlived: set[str] = set()  # the failures the run made progress after (the watcher sets it)
        self.ended = False

    @property
    def holds_incidents(self) -> bool:
        """Whether an incident waits to be said (the watcher then asks which failures the run outlived)."""
        return any(seen >= 0 for seen, _ in self._incidents.values())

    def _out(self, msg: Message) -> None:
        if msg.key not in self.sent:
            self.sent.add(msg.key)
            self._send(msg)

    def fire(self, episode: str, msg: Message) -> None:
        current = self._open.get(episode)
        if current is not None and current.cleared_at is not None:
            current.cleared_at, current.clear = None, None  # flapped back within the hold: say nothing
            self.sent.add(msg.key)
            return
        self._open[episode] = _Open(msg)
        self._out(msg)

    def clear(self, episode: str, msg: Message, now: float) -> None:
        current = self._open.get(episode)
        if current is None:
            self.sent.add(msg.key)  # never told about: its clear is news to nobody
            return
        current.cleared_at, current.clear = now, msg

    def incident(self, msg: Message, now: float, *, needs_progress: bool = False) -> None:
        """A failure the run may outlive: said once per id, after the hold (and, `needs_progress`, once the
        run went on after it), unless the run died of it."""
        if msg.alert is not None and msg.alert not in self._incidents and msg.key not in self.sent:
            self._incidents[msg.alert] = (now, msg)
            if needs_progress:
                self._needs_progress.add(msg.alert)

    def tick(self, now: float) -> None:
        """Send the clears and incidents whose hold has passed."""
        self._send_clears(now)
        self._send_incidents(now)

    def _send_clears(self, now: float) -> None:
        """Clears held long enough that the problem did not come straight back."""
        for episode, current in list(self._open.items()):
            if current.cleared_at is not None and now - current.cleared_at >= self.settings.clear_hold_s:
                del self._open[episode]
                if current.clear is not None:
                    self._out(current.clear)

    def _send_incidents(self, now: float) -> None:
        """Incidents past their hold (and past the progress they wait for), unless the run ended."""
        for alert, (seen, msg) in list(self._incidents.items()):
            if self.ended or seen < 0 or now - seen < self.settings.incident_hold_s:
                continue
            if alert not in self._needs_progress or alert in self.outlived:
                self._incidents[alert] = (-1.0, msg)
                self._out(msg)

    def finish(self, last: Message, died: bool) -> None:
        """The run ended: pending clears go out; incidents not yet said are the cause's (when it died) or
        said now; then `last` (the cause, or the end)."""
        self.tick(float("inf"))
        self.ended = True
        for alert, (_seen, msg) in self._incidents.items():
            outlived = alert not in self._needs_progress or alert in self.outlived
            if _seen >= 0 and not died and outlived:
                self._out(msg)
            elif _seen >= 0:
                self.sent.add(msg.key)
        self._out(last)


class Notifier:
    """The channels of one run: routes each message to the channels that admit it."""

    def __init__(
        self,
        settings: NotifySettings,
        on_failure: Callable[[str, Message], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.senders = [Sender(c, settings, on_failure, transport) for c in settings.channels]

    def send(self, msg: Message) -> None:
        for sender in self.senders:
            if sender.channel.admits(msg.severity, msg.alert):
                sender.put(msg)

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain every channel, in parallel, within `timeout_s` in all."""
        deadline = time.monotonic() + timeout_s
        closers = [
            threading.Thread(target=s.close, args=(max(0.1, deadline - time.monotonic()),), daemon=True)
            for s in self.senders
        ]
        for t in closers:
            t.start()
        for t in closers:
            t.join(max(0.1, deadline - time.monotonic()) + 1.0)
