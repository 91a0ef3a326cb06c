"""Shared construction of the app for Pilot and snapshot tests: deterministic, no Ray workers."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import events
from textual.keys import _character_to_key
from waiting import until

from backend.settings import Settings
from console.app import UltraConsoleApp

DATA = Path(__file__).resolve().parents[1] / "data"
MODELS = DATA / "app_models"
RUN_ID = "260101-120000-000"
AUDIT_ROWS = (
    {
        "time": "2026-01-01T12:00:00.000+00:00",
        "user": "ops",
        "action": "launch",
        "job": "ultra-console-260101-120000-000",
        "command": "ray job submit --submission-id ultra-console-260101-120000-000 -- python3 train.py",
        "result": "submitted",
        "details": {},
    },
    {
        "time": "2026-01-01T13:30:00.000+00:00",
        "user": "ops",
        "action": "abort",
        "job": "ultra-console-260101-120000-000",
        "command": "POST /api/jobs/ultra-console-260101-120000-000/stop",
        "result": "stop requested while RUNNING",
        "details": {},
    },
)


class PilotApp(UltraConsoleApp):
    """The app as tests drive it: every view mounted before the test's first line. In a terminal the views
    after the first mount just after the first frame is drawn (the app's one path); a test queries them at
    once."""

    CSS_PATH = str(Path(inspect.getfile(UltraConsoleApp)).with_name("app.tcss"))  # beside the class

    def __init__(self, settings: Settings | None = None, **kwargs: Any) -> None:
        """Settings built in a test skip the environment: `ULTRA_CONSOLE_WATCHER=0` (tests/conftest.py) still
        keeps a run's watcher (a Ray job of its own) out of the tests that are not about it."""
        if settings is not None and os.environ.get("ULTRA_CONSOLE_WATCHER") == "0":
            settings = settings.model_copy(update={"watcher": False})
        super().__init__(settings, **kwargs)

    async def on_mount(self) -> None:
        mounting = self.mount_later_views()
        if mounting is not None:
            await mounting


def write_audit(state_dir: Path) -> None:
    """An audit file as backend.cluster.audit writes it (JSON lines), with fixed times for snapshots."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "audit.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in AUDIT_ROWS), encoding="utf-8"
    )


def make_app(state_dir: Path, settings: Settings | None = None, **kwargs: Any) -> PilotApp:
    """The app over `settings` (as loaded from a config file) or over ones built from `readonly`, `keys`
    and `address` with `state_dir`."""
    if settings is None:
        settings_kw = {k: kwargs.pop(k) for k in ("readonly", "keys", "address") if k in kwargs}
        settings = Settings(state_dir=state_dir, **settings_kw)
    kwargs.setdefault("model_dir", str(MODELS))
    return PilotApp(settings, start_workers=False, watchdog=False, preview_run_id=RUN_ID, **kwargs)


def edit_settled(plan: Any, path: str, text: str) -> bool:
    """The plan view has taken `text` for the field at
    `path` and re-checked it (no debounced edit pending)."""
    return plan._pending is None and plan.edits.get(path, plan._form_values(plan.base)[path]) == text


async def type_text(pilot: Any, text: str, typed: Callable[[], object], what: str) -> None:
    """Type `text` as the terminal would, every key at once (the app still routes them one at a time, in
    order: console/key_order.py), then wait until `typed()` holds. Pilot's press lets the app go idle after
    each key (~50 ms a key at best, a re-render each): a long path typed that way was most of a test."""
    for ch in text:
        key = ch if ch.isalnum() else _character_to_key(ch)
        pilot.app.post_message(events.Key(key, ch))
    await until(pilot, typed, what, timeout=30)
