"""Plan-view edit latency: a keystroke in a layout field (re-check + redraw) vs a bare Textual Input.

Each keystroke in the plan form asks backend to rebuild the spec, re-run every rule, derive the
numbers and rebuild the command, then redraws the findings. This measures the round trip of one
key through Pilot (key -> handlers -> frame) for the console and, in the same process and rounds,
for a one-Input app, and prints the ratio (so machine load cancels out as far as it can).

    .venv/bin/python bench/plan_edit.py [--rounds 5] [--keys 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import Input

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.settings import Settings
from console.app import UltraConsoleApp
from console.widgets.layout_form import LayoutForm


def console_app(tmp: Path) -> UltraConsoleApp:
    """The console on the configured preset, no workers, an empty checkpoint dir (no variants to scan)."""
    (tmp / "models").mkdir(exist_ok=True)
    return UltraConsoleApp(
        Settings(state_dir=tmp / "state", address="http://127.0.0.1:9"),
        start_workers=False,
        watchdog=False,
        preview_run_id="260101-120000-000",
        model_dir=str(tmp / "models"),
    )


class Bare(App[None]):
    def compose(self) -> ComposeResult:
        yield Input("16")


async def per_key_ms(app: App[object], keys: int) -> float:
    """Mean ms per key for alternating backspace/'6' (the value flips 16 <-> 1: a rule flips too)."""
    async with app.run_test(size=(120, 40)) as pilot:
        if isinstance(app, Bare):
            app.query_one(Input).focus()
        else:
            form = app.query_one(LayoutForm)
            form.focus()
            form.move_to("cluster.nodes")
        await pilot.pause(0.2)
        start = time.perf_counter()
        for _ in range(keys // 2):
            await pilot.press("backspace")
            await pilot.pause(0.08)  # human pace: past the plan view's 60 ms debounce, so every key re-checks
            await pilot.press("6")
            await pilot.pause(0.08)
        elapsed = time.perf_counter() - start - (keys // 2) * 2 * 0.08
        return elapsed / (keys // 2 * 2) * 1000


async def main(rounds: int, keys: int) -> None:
    bare, plan = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            bare.append(await per_key_ms(Bare(), keys))
            plan.append(await per_key_ms(console_app(Path(tmp)), keys))
    b, p = statistics.median(bare), statistics.median(plan)
    print(
        f"bare Input: {b:.1f} ms/key   plan view (re-check + redraw): {p:.1f} ms/key   ratio {p / b:.2f}x "
        f"(median of {rounds} rounds x {keys} keys)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keys", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.keys))
