"""The watcher's ledger (dedup across restarts, a torn line, since-you-last-looked) and its sender (a webhook
that hangs then 500s delays neither another channel nor the caller; a redirect is not followed)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from loopback_http import QuietHandler, hanging, serve, stop_server

from backend.cluster.incidents import Entry, Ledger, since_last_looked
from backend.cluster.notify import Message, Notifier, Pacer
from backend.notify_settings import NotifySettings
from backend.severity import Severity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))


def test_ledger_keeps_entries_across_a_restart_and_a_torn_line(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    assert ledger.add(Entry("fire", "fire:kl|x|1", alert="kl-spike", message="kl spiked"))
    with open(tmp_path / "incidents.jsonl", "ab") as handle:
        handle.write(b'{"kind":"fire","key":"torn')  # a writer killed mid-line
    again = Ledger(tmp_path)
    assert not again.add(Entry("fire", "fire:kl|x|1", alert="kl-spike"))
    assert again.add(Entry("cause", "cause", alert="cuda-oom", message="OOM", try_="smaller batch"))
    assert [e.key for e in Ledger(tmp_path).entries()] == ["fire:kl|x|1", "cause"]
    first = since_last_looked(tmp_path, "alice")
    assert [e.key for e in first] == ["fire:kl|x|1", "cause"]
    assert since_last_looked(tmp_path, "alice") == []
    assert len(since_last_looked(tmp_path, "bob")) == 2


def _msg(key: str) -> Message:
    return Message("fire", key, "run-1", Severity.CRITICAL, "kl-spike fired", "kl spiked", "kl-spike")


def test_a_hanging_500_webhook_delays_nothing_else() -> None:
    got: list[tuple[float, dict[str, object]]] = []

    class Good(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((time.monotonic(), json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    release = threading.Event()
    good, slow = serve(Good), serve(hanging(release))
    try:
        settings = NotifySettings.model_validate(
            {
                "channels": [
                    {"name": "slow", "url": f"http://127.0.0.1:{slow.server_port}/h/secret1"},
                    {"name": "good", "url": f"http://127.0.0.1:{good.server_port}/h/secret2"},
                ],
                "timeout_s": 60,
                "retries": 1,
            }
        )
        notifier = Notifier(settings)
        t0 = time.monotonic()
        notifier.send(_msg("a"))
        notifier.send(_msg("b"))
        assert time.monotonic() - t0 < 0.1  # the caller (the log reader) never waits
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [b["key"] for _, b in got] == ["a", "b"]
        assert got[-1][0] - t0 < 3.0
        release.set()
        notifier.close(2.0)
    finally:
        release.set()
        stop_server(good)
        stop_server(slow)


def test_pacer_one_fire_one_clear_with_hysteresis() -> None:
    sent: list[str] = []
    pacer = Pacer(NotifySettings(clear_hold_s=5), lambda m: sent.append(m.key), set())
    pacer.fire("kl", _msg("fire:1"))
    pacer.clear("kl", _msg("clear:1"), now=10.0)
    pacer.fire("kl", _msg("fire:2"))  # flapped back inside the hold: nothing said
    pacer.clear("kl", _msg("clear:2"), now=11.0)
    pacer.tick(12.0)
    assert sent == ["fire:1"]  # no clear inside the hold
    pacer.tick(16.5)
    assert sent == ["fire:1", "clear:2"]
