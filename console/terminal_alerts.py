"""A critical alert reaches the operator at the terminal: the bell and a desktop notification.

Why here and so narrow: the notification is an escape sequence (OSC 9, iTerm2/kitty/WezTerm/ghostty; OSC
777 `notify`, foot/urxvt/VTE), the one kind of byte the console otherwise never lets out. So its text is
ours alone: the product's name, the alert's id (from configs/alerts.toml or the failure catalog: data, never
a log line or a value from one) and the run's id reduced to `[A-Za-z0-9_.-]`; then printable ASCII only
(`;` too is dropped, it separates OSC 777's fields), bounded. Inside tmux the sequence is wrapped in tmux's
passthrough (DCS `tmux;`, every ESC doubled; tmux 3.3+ passes it with `set -g allow-passthrough on`),
inside GNU screen in its DCS; the bell passes through both by itself. The app writes it only to a
terminal of its own (not headless, not a browser: console/app.py), once per alert and key, and not for what
the history of an attached run raised before it was read (`TerminalAlerts.seen`).

`terminal_notify` (config) picks: "auto" (OSC 777 where the terminal says it is foot, rxvt or VTE, else
OSC 9), "osc9", "osc777", "bell" (the bell alone) or "off".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from backend.settings import TerminalNotify as Mode
from backend.severity import Severity
from backend.signals.alerts import Alert

TEXT_CHARS = 160
_UNSAFE = re.compile(r"[^ -:<-~]")  # printable ASCII but ';'
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_OSC777_TERMS = ("foot", "rxvt")


def resolve(mode: Mode, env: Mapping[str, str]) -> Mode:
    """The mode `auto` stands for in this environment (the terminal named by TERM / VTE_VERSION)."""
    if mode != "auto":
        return mode
    term = env.get("TERM", "")
    if env.get("VTE_VERSION") or term.startswith(_OSC777_TERMS):
        return "osc777"
    return "osc9"


def plain(text: str, limit: int = TEXT_CHARS) -> str:
    """`text` with nothing a terminal could read as a control: printable ASCII, no `;`, bounded."""
    return _UNSAFE.sub("", text)[:limit]


def wrap_for(seq: str, env: Mapping[str, str]) -> str:
    """`seq` as the outer terminal gets it through tmux or screen (else as it is)."""
    if env.get("TMUX"):
        return "\x1bPtmux;" + seq.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    if env.get("STY"):
        return "\x1bP" + seq + "\x1b\\"
    return seq


def notification(mode: Mode, title: str, body: str, env: Mapping[str, str]) -> str:
    """The desktop notification's bytes ('' for the bell alone or off)."""
    title, body = plain(title, 60), plain(body)
    if mode == "osc9":
        return wrap_for(f"\x1b]9;{title}: {body}\x07", env)
    if mode == "osc777":
        return wrap_for(f"\x1b]777;notify;{title};{body}\x07", env)
    return ""


def safe_id(text: str) -> str:
    return _ID_UNSAFE.sub("_", text)[:80]


class TerminalAlerts:
    """Which critical alerts are news: each (alert, key) once a run, none of those `seen` (raised before the
    console looked)."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str]] = set()

    @staticmethod
    def _key(alert: Alert) -> tuple[str, str]:
        return (alert.id, alert.key or "")

    def seen(self, alerts: Iterable[Alert]) -> None:
        """`alerts` were there before: none of them rings."""
        self._told.update(self._key(a) for a in alerts if a.severity is Severity.CRITICAL)

    def news(self, alerts: Iterable[Alert]) -> list[str]:
        """The ids of the critical alerts not told yet, now told."""
        out = []
        for alert in alerts:
            key = self._key(alert)
            if alert.severity is Severity.CRITICAL and key not in self._told:
                self._told.add(key)
                out.append(alert.id)
        return out


def message_for(ids: list[str], run: str) -> tuple[str, str]:
    """(title, body) of one notification about `ids` of run `run`: our words and ids only."""
    named = ", ".join(safe_id(i) for i in ids[:3]) + (f" +{len(ids) - 3}" if len(ids) > 3 else "")
    return "ultra-console", f"critical {named} (run {safe_id(run)})"
