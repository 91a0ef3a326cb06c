"""What the first frame loads: opened as the CLI opens it (the preview helper computes the plan), the app
draws its whole first frame without pydantic or the submission stack, which cost it ~0.24 s (the plan
view's note on per-rank phases once pulled them in and put the frame at 1.9x a bare Textual app)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The preview helper must answer within its wait: measured alone, not beside the parallel pass.
pytestmark = pytest.mark.serial

_PROBE = """
import json, sys
from console.app import UltraConsoleApp
from backend.plan import preview_process

class Probe(UltraConsoleApp):
    CSS_PATH = sys.modules[UltraConsoleApp.__module__].__file__.replace("app.py", "app.tcss")

    def first_frame_drawn(self):
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "pydantic" or m in HEAVY)
        plan = self.view("plan")
        with open(sys.argv[1], "w") as fh:
            json.dump({"loaded": loaded, "command": plan.command_text}, fh)
        self.exit()

HEAVY = ("backend.plan.submission", "backend.plan.spec", "backend.settings", "httpx")
preview = preview_process.start()
assert preview is not None and preview.settings_answer(timeout=60) is not None
Probe(None, preview=preview, overrides={}, start_workers=False, watchdog=False).run(headless=True)
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the preview helper runs only with a second core")
def test_the_first_frame_loads_neither_pydantic_nor_the_submission_stack(tmp_path):
    out = tmp_path / "loaded.json"
    env = dict(
        os.environ,
        ULTRA_CONSOLE_STATE_DIR=str(tmp_path / "state"),
        ULTRA_CONSOLE_CONFIG=str(tmp_path / "none.toml"),
        RAY_ADDRESS="http://127.0.0.1:9",
        PYTHONPATH=str(ROOT),
    )
    subprocess.run([sys.executable, "-c", _PROBE, str(out)], env=env, cwd=ROOT, timeout=120, check=True)
    seen = json.loads(out.read_text())
    assert "ray job submit" in seen["command"]  # the helper's plan is the one drawn
    assert seen["loaded"] == []
