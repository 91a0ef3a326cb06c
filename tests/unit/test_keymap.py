"""The keymap knows every scope's binding ids before any view module is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from console import keymap
good, bad = keymap.validate_keymap({"logs.search": "ctrl+f", "run.abort": "ctrl+k", "no.such": "x"})
views = sorted(m for m in sys.modules if m.startswith("console.views"))
print(json.dumps({"good": good, "bad": bad, "views": views}))
"""


def test_settings_check_needs_no_view_import() -> None:
    """As at start-up: the settings are checked while only the first view may be imported."""
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["views"] == []
    assert seen["good"] == {"logs.search": "ctrl+f", "run.abort": "ctrl+k"}
    assert len(seen["bad"]) == 1 and "'no.such'" in seen["bad"][0] and "\n" not in seen["bad"][0]


def test_binding_ids_are_unique_and_scoped() -> None:
    from console import keymap

    ids = [s.id for s in keymap.specs()]
    assert len(ids) == len(set(ids))
    for scope, rows in keymap.TABLE.items():
        assert all(s.id.startswith(f"{scope}.") for s in rows), scope


def test_an_unknown_id_names_what_was_meant() -> None:
    from console import keymap

    good, bad = keymap.validate_keymap({"logs.serch": "ctrl+f", "nope": "x", "app.quit": "ctrl+q"})
    assert good == {"app.quit": "ctrl+q"}
    typo, stray = bad
    assert "'logs.serch'" in typo and "logs.search" in typo and "plan.launch" not in typo
    assert "'nope'" in stray and "logs." in stray and "run." in stray
