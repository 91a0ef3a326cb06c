"""The plan's first frame, computed by a helper process while the console imports Textual.

Opening the app costs two imports one after the other on one core: Textual (~0.14 s) and pydantic
with the recipe (~0.1 s). Started here first, on another core, the helper has the plan ready by the
time the app composes it. It prints two JSON lines: first the validated basics of the settings (never
the token) and the run id of the command preview, or {"error": one line} for bad settings (read before
the app starts, so a bad config is one line on a plain terminal); then the `PlanStart` (read when the
plan view is composed). Anything else (it failed, was slow, printed garbage) reads as None and the
console computes what is missing itself, as it does on every edit.

The helper runs this file's `main` in isolated mode (no cwd, no PYTHON* variables) with the console's
own package root first on sys.path, so it is the same code the console runs.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.json_fields import Fields

if TYPE_CHECKING:
    from backend.plan.view_start import PlanStart

WAIT_S = 5.0  # after this the console stops waiting and computes the plan itself
ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    f"import sys; sys.path.insert(0, {ROOT!r}); from "
    "backend.plan.preview_process import main; sys.exit(main())"
)


@dataclass(frozen=True, slots=True)
class PreviewBasics:
    """The helper's first answer for good settings: what the first frame needs before they are loaded."""

    address: str
    readonly: bool
    keys: Mapping[str, str]  # the operator's key remaps (validated by the console's keymap)
    run_id: str  # the run id the command preview holds


@dataclass(frozen=True, slots=True)
class PreviewRefused:
    """The helper's first answer for bad settings: one line, as `load_settings` says it."""

    error: str


SettingsAnswer = PreviewBasics | PreviewRefused


def parse_settings_answer(data: Mapping[str, object]) -> SettingsAnswer | None:
    """The typed first answer, or None for any other shape (the console then loads the settings itself)."""
    if set(data) == {"error"}:
        error = data["error"]
        return PreviewRefused(error) if isinstance(error, str) else None
    answer = Fields(data)
    settings, run_id = answer.obj("settings"), answer.string("run_id")  # not an object: every field missing
    address, readonly, keys = settings.string("address"), settings.value("readonly"), settings.value("keys")
    if run_id is None or address is None or not isinstance(readonly, bool) or not isinstance(keys, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        return None
    return PreviewBasics(address, readonly, keys, run_id)


class Preview:
    """A running helper: `settings_answer()` is its first
    answer, `plan()` its second (each None on failure)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._buffer = b""
        self._lines: list[dict[str, Any] | None] = []
        self._failed = False

    def settings_answer(self, timeout: float = WAIT_S) -> SettingsAnswer | None:
        """The settings' basics and the run id, or the one-line error; None when the helper gave neither."""
        line = self._line(0, timeout)
        answer = parse_settings_answer(line) if line is not None else None
        if line is not None and answer is None:
            self._fail()
            self._lines[0] = None
        return answer

    def plan(self, timeout: float = WAIT_S) -> PlanStart | None:
        """The plan view's start as the helper computed it, or None (the view then computes it)."""
        answer = self._line(1, timeout)
        if answer is None:
            return None
        # It exits by itself now; reap it off the console's thread rather than wait for its shutdown.
        threading.Thread(target=self._proc.wait, name="plan-preview-reaper", daemon=True).start()
        from backend.plan.view_start import PlanStart  # pydantic-free; loaded only once a plan came back

        try:
            return PlanStart.from_json(answer["start"])
        except (KeyError, TypeError, ValueError):
            return None

    def _line(self, index: int, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while len(self._lines) <= index and not self._failed:
            self._lines.append(self._read_line(deadline))
        return self._lines[index] if index < len(self._lines) else None

    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        stdout = self._proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail()
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._fail()
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            self._fail()
            return None
        return data

    def _fail(self) -> None:
        """Stop reading: this answer and every later one read as None."""
        self._failed = True
        self._finish()

    def _finish(self) -> None:
        """Reap the helper (killed first if it is still running: nothing more is read from it)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _cores() -> int:
    """CPUs this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def start(
    *, address: str | None = None, readonly: bool | None = None, python: str | None = None
) -> Preview | None:
    """Start the helper (None if it cannot be started, or on a single CPU, where it would only add its
    own interpreter start to the console's). `python`: the interpreter (tests)."""
    if _cores() < 2:
        return None
    argv = [python or sys.executable, "-I", "-c", _BOOT]
    if address:
        argv += ["--address", address]
    if readonly:
        argv.append("--readonly")
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
        )
    except OSError:
        return None
    return Preview(proc)


def helper_lines(address: str | None = None, readonly: bool | None = None) -> Iterator[dict[str, Any]]:
    """What the helper prints, in order: the basics (or the error), then the plan. A generator, so
    the first line is out before the plan is computed."""
    # Imported here, in the helper process only: the CLI imports this module to start the helper, which
    # it must do before paying for the plan stack (~0.7 s), or the two would not overlap.
    from backend.errors import ConsoleError
    from backend.plan.run_id import new_run_id
    from backend.settings import load_settings

    try:
        settings = load_settings(address=address, readonly=readonly)
    except ConsoleError as err:
        yield {"error": str(err)}
        return
    run_id = new_run_id()
    yield {
        "settings": {"address": settings.address, "readonly": settings.readonly, "keys": settings.keys},
        "run_id": run_id,
    }
    from backend.plan.view_start import plan_start  # after the first answer: it needs none of the stack

    yield {"start": plan_start(settings.preset, None, run_id=run_id, address=settings.address).to_json()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plan_preview")
    parser.add_argument("--address", default=None)
    parser.add_argument("--readonly", action="store_true", default=None)
    args = parser.parse_args(argv)
    for answer in helper_lines(args.address, args.readonly):
        print(json.dumps(answer), flush=True)
    return 0
