"""The plan's first frame, computed by a helper process while the console imports Textual.

Opening the app costs two imports one after the other on one core: Textual (~0.14 s) and pydantic
with the recipe (~0.1 s). Started here first, on another core, the helper has the plan ready by the
time the app composes it. It prints one JSON object: the validated basics of the settings (never the
token), the run id of the command preview and the `PlanStart`. Anything else (it failed, was slow,
printed garbage) returns None and the console computes the plan itself, as it does on every edit.

The helper runs this file's `main` in isolated mode (no cwd, no PYTHON* variables) with the console's
own package root first on sys.path, so it is the same code the console runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WAIT_S = 5.0  # after this the console stops waiting and computes the plan itself
ROOT = str(Path(__file__).resolve().parent.parent)
_BOOT = f"import sys; sys.path.insert(0, {ROOT!r}); from backend.plan_preview import main; sys.exit(main())"


class Preview:
    """A running helper; `result()` is its answer, or None."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._result: dict[str, Any] | None = None
        self._done = False

    def result(self, timeout: float = WAIT_S) -> dict[str, Any] | None:
        if self._done:
            return self._result
        self._done = True
        try:
            out, _ = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            return None
        if self._proc.returncode != 0:
            return None
        try:
            data = json.loads(out)
        except ValueError:
            return None
        self._result = data if isinstance(data, dict) else None
        return self._result


def start(*, address: str | None = None, readonly: bool | None = None,
          python: str | None = None) -> Preview | None:
    """Start the helper (None if it cannot be started). `python`: the interpreter (tests)."""
    argv = [python or sys.executable, "-I", "-c", _BOOT]
    if address:
        argv += ["--address", address]
    if readonly:
        argv.append("--readonly")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, close_fds=True)
    except OSError:
        return None
    return Preview(proc)


def compute(address: str | None = None, readonly: bool | None = None) -> dict[str, Any]:
    """What the helper prints: {"error": one line} for bad settings, else the basics and the plan."""
    from backend.command import new_run_id
    from backend.errors import ConsoleError
    from backend.plan_start import plan_start
    from backend.settings import load_settings

    try:
        settings = load_settings(address=address, readonly=readonly)
    except ConsoleError as err:
        return {"error": str(err)}
    run_id = new_run_id()
    start_ = plan_start(settings.preset, None, run_id=run_id, address=settings.address)
    return {"settings": {"address": settings.address, "readonly": settings.readonly, "keys": settings.keys},
            "run_id": run_id, "start": start_.to_json()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plan_preview")
    parser.add_argument("--address", default=None)
    parser.add_argument("--readonly", action="store_true", default=None)
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(compute(args.address, args.readonly)))
    return 0
