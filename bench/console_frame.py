"""Time to first full frame of `ultra-console` vs a bare Textual app, in a real pty (target <= 1.5x).

Both start as fresh processes (imports included) in a 200x50 pty; the clock stops when the frame's
last widget, the footer's palette key, has been written: the same text, "Commands", in both (the
bare app labels its palette key like the console does). The console starts exactly as an
operator's would (`ultra-console`, through the CLI), with workers on and the Ray dashboard
unreachable (it must not wait for Ray); its first frame carries the whole plan view (the console's
pty test checks that). Median of --runs alternating runs; printed as seconds and as the ratio
console / bare.

Both run from compiled bytecode, as installed code does: Textual's came compiled with its wheel; ours
is compiled here first (an editable checkout under PYTHONDONTWRITEBYTECODE=1 would otherwise
recompile every module on each start). `--source` skips that step, to show the difference.

Usage: .venv/bin/python bench/console_frame.py [--runs 5]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pty import PtyApp

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).with_name("ultra-console")
MARK = b"Commands"


def first_frame(argv: list[str], env: dict[str, str]) -> float:
    app = PtyApp(argv, cols=200, rows=50, env=env)
    app.watch(MARK)
    try:
        return app.wait_for(MARK, 60)
    finally:
        app.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--source", action="store_true", help="do not compile our modules first")
    args = ap.parse_args()
    if not args.source:
        for package in ("backend", "console", "shim"):
            compileall.compile_dir(str(HERE.parent / package), quiet=1)
    state = tempfile.mkdtemp(prefix="uc-frame-")
    env = {"XDG_STATE_HOME": state, "XDG_CONFIG_HOME": state, "RAY_ADDRESS": "http://127.0.0.1:9"}
    bare, console = [], []
    for _ in range(args.runs):
        bare.append(first_frame([sys.executable, str(HERE / "_console_apps.py"), "bare"], env))
        console.append(first_frame([str(BIN)], env))
    b, c = statistics.median(bare), statistics.median(console)
    print(f"first full frame, 200x50 pty, median of {args.runs}:")
    print(f"  bare Textual app   {b:.3f} s   (runs: {' '.join(f'{x:.3f}' for x in bare)})")
    print(f"  ultra-console      {c:.3f} s   (runs: {' '.join(f'{x:.3f}' for x in console)})")
    print(f"  ratio              {c / b:.2f}x  (target <= 1.50x) {'OK' if c / b <= 1.5 else 'OVER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
