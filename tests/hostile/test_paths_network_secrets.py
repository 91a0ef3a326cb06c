"""Hostile input, part A: paths a hub names, text from the network, secrets, and rough edges of the
operator's own input. Each class of hostile input goes to the entry point an operator uses (the CLI: as a
subprocess for one case of each command, the others in this process through the same `main`; the app
through Pilot or a real pseudo-terminal; the node's prepare job as it runs on a node) and the test asserts:
one clear line, the documented exit code, no traceback, no ESC or C1 byte out, no secret out, and no file
touched outside its target. Every server is a loopback one (run in `unshare -n`)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from app_helpers import PilotApp, make_app
from fake_hub import MODEL_REPO, FakeHub, model_files
from hostile_http import HostileServer
from runhelp import REPO, cli, cli_env, cli_in_process, one_line_error
from textual.widgets import Static
from waiting import until

from backend.cluster.audit import AuditLog
from backend.cluster.controller import RunController
from backend.cluster.dashboard import DashboardUnreachable
from backend.cluster.node_job import script_source
from backend.cluster.prepare import JOB_SCRIPT, MARK
from backend.sanitize import clean_chunk, sanitize_text
from backend.settings import Settings
from backend.severity import Severity
from console import keymap
from console.messages import Notice

# What must never reach a terminal, a notice or a saved file: C0 controls but tab/newline, DEL, C1.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# An HTTP error body as an attacker writes it: OSC 52 clipboard write, title change, screen clear, 8-bit CSI
# and OSC (C1 0x9b, 0x9d), a bell, a bidi override.
HOSTILE = (
    "Traceback (most recent call last):\nValueError: boom \x1b]52;c;cm0gLXJmIH4=\x07 \x1b]0;pwned\x07"
    "\x1b[2J\x1b[H \x9b31m red \x9d0;title\x9c \x07 \u202egnp.exe"
)


def assert_clean(text: str) -> None:
    assert not UNSAFE.search(text), f"control or escape byte reached the operator: {text!r}"


# ---------------------------------------------------------------- 1. the hub names where files go


def run_node_prepare(tmp: Path, hub: FakeHub, checkpoint: Path) -> list[dict]:
    """The prepare job exactly as a node runs it (`python3 -c <source> --prepare-job <json>`), fetching."""
    request = {
        "node_id": "node-a",
        "node_ip": "127.0.0.1",
        "checkpoint": str(checkpoint),
        "dataset": str(tmp / "data" / "d.jsonl"),
        "input_key": "prompt",
        "label_key": "label",
        "fetch": True,
        "token": "t0",
        "model_repo": MODEL_REPO,
        "wait_s": 5,
    }
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp / "home"),
        "HF_HOME": str(tmp / "hf"),
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    source = script_source(JOB_SCRIPT)
    assert "from backend" not in source  # a node has no console: the path rule travels inside the script
    proc = subprocess.run(
        [sys.executable, "-c", source, "--prepare-job", json.dumps(request)],
        cwd=tmp / "home",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(ln[len(MARK) :]) for ln in proc.stdout.splitlines() if ln.startswith(MARK)]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["../../victim.txt", "{abs}", "sub/../../../victim.txt"])
def test_a_hub_listing_that_names_outside_the_target_is_refused_and_nothing_outside_is_touched(
    tmp_path, name
):
    (tmp_path / "home").mkdir()
    outside = tmp_path / "work"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_bytes(
        b"the operator's file"
    )  # shorter than the hub says: the old fetch moved it aside to .part
    target = outside / "models" / "Tiny"
    name = str(victim) if name == "{abs}" else name
    hub = FakeHub({("model", MODEL_REPO): {**model_files(), name: b"x" * 4096}}).start()
    try:
        before = {k: v for k, v in tree(tmp_path).items() if not k.startswith(("home", "hf"))}
        events = run_node_prepare(tmp_path, hub, target)
    finally:
        hub.stop()
    assert not list(tmp_path.rglob("*.part"))  # the old fetch renamed the operator's file to victim.txt.part
    after = {k: v for k, v in tree(tmp_path).items() if not k.startswith(("home", "hf"))}
    assert after == before  # nothing written, moved or renamed: not even inside the target
    assert not [r for r in hub.requests if "/resolve/" in r.path]  # refused before any download
    errors = [e["message"] for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and repr(name) in errors[0] and "nothing fetched" in errors[0], errors
    assert "\n" not in errors[0]


def test_a_symlink_in_the_target_never_leads_a_download_out(tmp_path):
    (tmp_path / "home").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "work" / "models" / "Tiny"
    target.mkdir(parents=True)
    (target / "sub").symlink_to(elsewhere)
    hub = FakeHub({("model", MODEL_REPO): {**model_files(), "sub/evil.bin": b"x" * 4096}}).start()
    try:
        events = run_node_prepare(tmp_path, hub, target)
    finally:
        hub.stop()
    assert list(elsewhere.iterdir()) == []
    errors = [e["message"] for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and "'sub/evil.bin'" in errors[0] and "symlink" in errors[0], errors


# ---------------------------------------------------------------- 2. text from the network


@pytest.mark.parametrize("clean", [lambda t: sanitize_text(t), lambda t: clean_chunk(t.encode()).decode()])
def test_the_sanitiser_drops_8_bit_sequences_whole(clean):
    """C1 controls introduce sequences of their own (CSI 0x9b, OSC 0x9d, DCS 0x90): their payload goes too."""
    text = "a\x9d0;evil-title\x9cb \x9b2Jc \x90dcs-payload\x9cd \x1b]52;c;ZXZpbA==\x07e \x85\x8ef\n"
    assert clean(text) == "ab c d e f\n"


@pytest.fixture
def hostile_500():
    # latin-1: the raw byte 0x9b reaches the client as U+009B, an 8-bit CSI
    server = HostileServer(
        500, HOSTILE.encode("latin-1", "replace") + b" \x9b2J", "text/plain; charset=latin-1"
    ).start()
    yield server
    server.stop()


@pytest.mark.parametrize("command", [["status"], ["nodes"], ["abort", "--yes"]])
def test_an_http_error_body_reaches_the_cli_as_one_clean_line(tmp_path, hostile_500, command):
    # abort's one real process here; status's and nodes' are the token and URL tests' below
    run = cli if command[0] == "abort" else cli_in_process
    proc = run(hostile_500.address, tmp_path / "state", *command)
    line = one_line_error(proc)
    assert proc.returncode == 1
    assert_clean(proc.stdout + proc.stderr)
    assert "HTTP 500" in line and "boom" in line


async def test_an_http_error_body_reaches_the_app_banner_and_notices_clean(tmp_path, hostile_500):
    settings = Settings(state_dir=tmp_path, address=f"http://{hostile_500.address}")
    app = PilotApp(settings, start_workers=True, watchdog=False, preview_run_id="260101-120000-000")
    async with app.run_test(size=(120, 40)) as pilot:
        banner = app.query_one("#banner", Static)
        await until(pilot, lambda: banner.has_class("-shown"), "the dashboard-lost banner", timeout=30)
        shown = str(banner.content)
        assert "HTTP 500" in shown and "boom" in shown
        assert_clean(shown)
        app.post_message(Notice("job message: " + HOSTILE, Severity.WARNING))
        await until(pilot, lambda: any("job message" in n.message for n in app._notifications), "the notice")
        for note in app._notifications:
            assert_clean(note.message)
            assert "\n" not in note.message


def test_a_saved_file_holds_no_escape_from_the_network(tmp_path):
    log = AuditLog(tmp_path)
    log.record(
        "abort",
        job="raysubmit_x",
        command="ultra-console abort",
        result="stop refused: " + HOSTILE,
        details={"message": HOSTILE},
    )
    raw = (tmp_path / "audit.jsonl").read_bytes()
    assert b"\x1b" not in raw and b"\xc2\x9b" not in raw and b"\xc2\x9d" not in raw
    entry = json.loads(raw)
    assert_clean(entry["result"] + entry["details"]["message"])
    assert "boom" in entry["result"]


# ---------------------------------------------------------------- 3. secrets never printed


@pytest.fixture
def echoing_403():
    server = HostileServer(
        403, b"PermissionError: token sekrit-token-123 is not valid for this cluster"
    ).start()
    yield server
    server.stop()


@pytest.mark.parametrize("token", ["sekrit-token-123\r", "sekrit-token-123 ", "sekrit token-123"])
def test_a_token_a_header_cannot_carry_is_refused_in_one_line_naming_no_token(tmp_path, echoing_403, token):
    run = cli if token == "sekrit-token-123\r" else cli_in_process  # status's one real process
    proc = run(echoing_403.address, tmp_path / "state", "--token", token, "status")
    line = one_line_error(proc)
    assert proc.returncode == 1
    assert "sekrit" not in proc.stdout + proc.stderr and "Illegal header" not in line
    assert "unreachable" not in line and "token" in line and "RAY_AUTH_TOKEN" in line
    assert echoing_403.requests == []  # refused before any request carried it
    via_env = cli_in_process(
        echoing_403.address,
        tmp_path / "state",
        "status",
        env=cli_env(tmp_path / "state", RAY_AUTH_TOKEN=token),
    )
    assert "sekrit" not in via_env.stdout + via_env.stderr and via_env.returncode == 1


def test_a_token_a_library_error_echoes_is_redacted(tmp_path, echoing_403):
    proc = cli_in_process(echoing_403.address, tmp_path / "state", "--token", "sekrit-token-123", "status")
    line = one_line_error(proc)
    assert "refused the token" in line and "***" in line
    assert "sekrit-token-123" not in proc.stdout + proc.stderr


def test_url_credentials_are_never_echoed(tmp_path):
    server = HostileServer(401, b"Unauthorized").start()
    try:
        proc = cli_in_process(f"http://admin:hunter2pass@{server.address}", tmp_path / "state", "status")
    finally:
        server.stop()
    line = one_line_error(proc)
    assert "requires a token" in line and "admin:***@" in line
    assert "hunter2pass" not in proc.stdout + proc.stderr
    with socket.socket() as s:  # nothing listens there: the unreachable message names the address too
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # nodes' one real process
    proc = cli(f"http://admin:hunter2pass@127.0.0.1:{port}", tmp_path / "state", "nodes")
    assert "unreachable" in one_line_error(proc) and "hunter2pass" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------- 7. rough edges of the operator's input

DEEP = "[" * 3000 + "]" * 3000


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "case",
    ["deep --set", "deep preset", "deep config", "non-UTF-8 config", "bad port", "address without host"],
)
def test_rough_operator_input_is_one_clear_line(tmp_path, case):
    state = tmp_path / "state"
    env = cli_env(state)
    address, args = "http://127.0.0.1:9", ["status"]
    if case == "deep --set":
        args, want = ["plan", "--set", f"train.tp={DEEP}"], "train.tp"
    elif case == "deep preset":
        preset = _write(tmp_path / "deep.toml", f"a = {DEEP}\n".encode())
        args, want = ["plan", "--preset", str(preset)], "nested deeper"
    elif case == "deep config":
        env["ULTRA_CONSOLE_CONFIG"] = str(
            _write(tmp_path / "config.toml", f"keys = {{ a = {DEEP} }}\n".encode())
        )
        want = "nested deeper"
    elif case == "non-UTF-8 config":
        env["ULTRA_CONSOLE_CONFIG"] = str(_write(tmp_path / "config.toml", b'address = "\xff\xfe"\n'))
        want = "not UTF-8"
    elif case == "bad port":
        address, want = "http://h:abc", "bad dashboard address"
    else:
        address, want = "http://:8265", "want http://HOST:PORT"
    run = cli if case == "deep --set" else cli_in_process  # plan's one real process
    proc = run(address, state, *args, env=env)
    line = one_line_error(proc)
    assert proc.returncode == 1
    assert want in line and "internal error" not in line, line
    assert not re.search(r"RecursionError|UnicodeDecodeError|InvalidURL|ExceptionGroup", line)


def test_a_remap_onto_another_bindings_key_is_refused_in_one_line():
    good, problems = keymap.validate_keymap(
        {"plan.launch": "2", "app.view_run": "r", "logs.follow": "F", "app.back": "escape"}
    )
    assert good == {"logs.follow": "F", "app.back": "escape"}  # its own default key is no conflict
    assert len(problems) == 2 and all("\n" not in p and "refused" in p for p in problems)
    assert "'app.view_run'" in problems[0] and "'events.refresh'" in problems[1]


async def test_the_app_keeps_a_view_reachable_when_a_remap_would_take_its_key(tmp_path):
    app = make_app(tmp_path, keys={"plan.launch": "2"})
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot, lambda: any("refused" in n.message for n in app._notifications), "the remap's warning"
        )
        await pilot.press("2")
        await until(pilot, lambda: app.current_view == "run", "the Run view on 2")


async def test_the_dashboard_fault_is_reported_again_when_its_words_change(tmp_path):
    """The banner shows what the workers last said: a fault whose text changed must be said again."""
    faults = ["connect refused", "connect refused", "read timed out"]

    class Done(Exception):
        pass

    class FlakyClient:
        address = "http://127.0.0.1:9"

        async def get_job(self, job_id: str):
            if not faults:
                raise Done
            raise DashboardUnreachable(f"Ray dashboard unreachable at {self.address}: {faults.pop(0)}")

    ctl = RunController(FlakyClient(), state_dir=tmp_path, poll_s=0.01)  # type: ignore[arg-type]
    ctl.job = type("Job", (), {"id": "raysubmit_1"})()  # attached: watch() polls it
    said: list[str] = []
    ctl.subscribe(lambda e: said.append(e.text) if e.kind == "error" else None)
    with pytest.raises(Done):
        await asyncio.wait_for(ctl.watch(until_terminal=False), 10)
    assert [s.rsplit(": ", 1)[1] for s in said] == ["connect refused", "read timed out"]


# ---------------------------------------------------------------- 7. signals give the terminal back


def _read_until(fd: int, out: bytearray, want: bytes | None, timeout: float) -> bool:
    """Read the pty into `out` until `want` appears (or, for None, until it closes); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if want is not None and want in out:
            return True
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other end closed
            return want is None
        if not chunk:
            return want is None
        out += chunk
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT])
def test_sigterm_and_sigquit_leave_the_terminal_as_it_was(tmp_path, sig):
    env = cli_env(tmp_path / "state", TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the app on a terminal, its dashboard nowhere (the app keeps working)
        os.chdir(REPO)
        os.execve(
            sys.executable, [sys.executable, "-m", "console.cli", "--address", "http://127.0.0.1:9"], env
        )
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        out = bytearray()
        assert _read_until(fd, out, b"\x1b[?1049h", 60), bytes(out[-400:])  # the alternate screen
        assert _read_until(fd, out, b"ultra-console", 60), bytes(out[-400:])  # the first frame: mounted
        mark = len(out)
        os.kill(pid, sig)
        assert _read_until(fd, out, None, 30), "the app did not end"
        _, status = os.waitpid(pid, 0)
    finally:
        with_child_gone(pid)
        os.close(fd)
    after = bytes(out[mark:])
    assert b"\x1b[?1049l" in after, after[-400:]  # back on the main screen
    assert b"\x1b[?1000l" in after and b"\x1b[?1006l" in after, after[-400:]  # mouse tracking off
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 128 + sig


def with_child_gone(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
