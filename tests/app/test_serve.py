"""`ultra-console serve`: answers on loopback with the page and a live app session over its websocket,
refuses a public interface by default."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
from httpx_ws import WebSocketSession, connect_ws
from waiting import until
from wsproto.events import BytesMessage, TextMessage

from console.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_on_loopback_then_stops(tmp_path):
    port = _free_port()
    env = dict(os.environ, ULTRA_CONSOLE_STATE_DIR=str(tmp_path), RAY_ADDRESS="http://127.0.0.1:9")
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.cli", "--readonly", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def answered() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                return None

        page = asyncio.run(until(None, answered, "the server's first page", 30, interval=0.2))
        assert page.status_code == 200
        assert "ultra-console" in page.text and "/ws" in page.text
        # A browser session: the page's websocket runs the real app with the same flags (--readonly).
        with (
            httpx.Client() as client,
            connect_ws(
                f"http://127.0.0.1:{port}/ws?width=100&height=30", client, session_class=WebSocketSession
            ) as ws,
        ):
            seen: list[bytes] = []

            def read_only_drawn() -> bool:  # one websocket message per look
                event = ws.receive(timeout=10)
                data = event.data if isinstance(event, (TextMessage, BytesMessage)) else b""
                seen.append(data.encode() if isinstance(data, str) else bytes(data))
                return b"READ-ONLY" in b"".join(seen)

            asyncio.run(until(None, read_only_drawn, "the read-only app on the websocket", 30, interval=0))
        screen = b"".join(seen)
        assert b"READ-ONLY" in screen and b"Plan" in screen
        listening = {
            c.laddr.ip
            for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
        }
        assert listening == {"127.0.0.1"}  # bound to loopback only
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None


def test_serve_refuses_public_interface_without_flag(capsys):
    assert main(["serve", "--host", "0.0.0.0", "--port", "8123"]) == 1
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0" in err and err.count("\n") == 1


def test_serve_command_line_is_quoted_and_has_no_token():
    import argparse

    from console.commands.serve import app_command

    args = argparse.Namespace(address="http://h:8265; rm -rf /", readonly=True, job=None, token="s3cret")
    line = app_command(args)
    assert "'http://h:8265; rm -rf /'" in line and "--readonly" in line and "s3cret" not in line
