"""The terminal's own notification of a critical alert (console/terminal_alerts.py): our words and ids only
(an escape, a BEL or a `;` in a run id cannot get out), OSC 9 or 777 by the terminal, wrapped for tmux and
screen, each alert once, none of what the history raised before the console looked."""

from __future__ import annotations

from backend.severity import Severity
from backend.signals.alerts import Alert
from console.terminal_alerts import TerminalAlerts, message_for, notification, plain, resolve

HOSTILE = "run\x1b]52;c;ZXZpbA==\x07;\x9b31m"


def test_the_mode_follows_the_terminal_and_the_setting() -> None:
    assert resolve("auto", {"TERM": "xterm-256color"}) == "osc9"
    assert resolve("auto", {"TERM": "foot"}) == "osc777"
    assert resolve("auto", {"TERM": "xterm-256color", "VTE_VERSION": "7600"}) == "osc777"
    assert resolve("off", {"TERM": "foot"}) == "off" and resolve("bell", {}) == "bell"
    assert notification("bell", "t", "b", {}) == "" and notification("off", "t", "b", {}) == ""


def test_no_control_from_a_name_gets_out() -> None:
    title, body = message_for(["cuda-oom", "shim-missing"], HOSTILE)
    for mode in ("osc9", "osc777"):
        seq = notification(mode, title, body, {})
        inner = seq[seq.index(";") + 1 : -1]  # between the OSC's number and its BEL
        assert "\x1b" not in inner and "\x07" not in inner and "\x9b" not in inner
        assert "cuda-oom" in inner and "shim-missing" in inner
    assert notification("osc777", title, body, {}).count(";") == 3  # 777;notify;title;body
    assert plain("a;b\x1bc\x07d\u202ee") == "abcde"


def test_tmux_and_screen_get_their_passthrough() -> None:
    plain_seq = notification("osc9", "ultra-console", "critical x", {})
    assert plain_seq == "\x1b]9;ultra-console: critical x\x07"
    tmux = notification("osc9", "ultra-console", "critical x", {"TMUX": "/tmp/tmux-0/default,1,0"})
    assert tmux == "\x1bPtmux;\x1b\x1b]9;ultra-console: critical x\x07\x1b\\"
    screen = notification("osc9", "ultra-console", "critical x", {"STY": "1.pts-0"})
    assert screen == "\x1bP" + plain_seq + "\x1b\\"


def test_each_critical_alert_once_and_none_from_before() -> None:
    told = TerminalAlerts()
    old = Alert("shim-missing", Severity.CRITICAL, "rank 3 has no shim line")
    told.seen([old, Alert("kl-spike", Severity.WARNING, "kl")])
    oom = Alert("cuda-oom", Severity.CRITICAL, "CUDA out of memory", key="gpu3")
    assert told.news([old, oom, Alert("kl-spike", Severity.WARNING, "kl")]) == ["cuda-oom"]
    assert told.news([old, oom]) == []
