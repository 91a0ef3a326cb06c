"""CPU and bytes/s written to the terminal by the console, idle and showing the GPU fleet at 1 Hz.

Each scenario runs the app in a 200x50 pty (bench/_pty.py), waits --warmup seconds, then measures
the app's CPU (psutil, % of one core) and the bytes it wrote to the terminal over --seconds.
Baseline in the same run: a bare Textual app, idle. Scenarios:
  idle         the run view, no data arriving                    target <= 0.5% CPU
  128 GPUs     16 nodes x 8, a new snapshot every second         target <= 3% CPU, <= 40 KB/s
  1024 GPUs    128 nodes x 8, a new snapshot every second        target <= 10% CPU
The snapshots change every GPU's values every second (worst case for repainting).

Usage: .venv/bin/python bench/console_refresh.py [--seconds 10] [--warmup 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pty import PtyApp

HERE = Path(__file__).resolve().parent


def run(kind: list[str], seconds: float, warmup: float, env: dict[str, str]) -> tuple[float, float]:
    app = PtyApp([sys.executable, str(HERE / "_console_apps.py"), *kind], cols=200, rows=50, env=env)
    try:
        app.measure(warmup)
        return app.measure(seconds)
    finally:
        app.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=4.0)
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="uc-refresh-")
    env = {"XDG_STATE_HOME": state, "XDG_CONFIG_HOME": state}
    rows = [
        ("bare Textual app, idle", ["bare"], None, None),
        ("console run view, idle", ["idle"], 0.5, None),
        ("128 GPUs at 1 Hz", ["fleet", "16", "1"], 3.0, 40_000),
        ("1024 GPUs at 1 Hz", ["fleet", "128", "1"], 10.0, None),
    ]
    base_cpu = None
    print(f"200x50 pty, {args.seconds:.0f} s after {args.warmup:.0f} s warm-up (CPU = % of one core)")
    for label, kind, cpu_target, bps_target in rows:
        cpu, bps = run(kind, args.seconds, args.warmup, env)
        if base_cpu is None:
            base_cpu = cpu
        verdict = []
        if cpu_target is not None:
            verdict.append(f"CPU target <= {cpu_target}%: {'OK' if cpu <= cpu_target else 'OVER'}")
        if bps_target is not None:
            verdict.append(
                f"bytes target <= {bps_target / 1000:.0f} KB/s: {'OK' if bps <= bps_target else 'OVER'}"
            )
        ratio = f"{cpu / base_cpu:.1f}x bare CPU" if base_cpu else "bare CPU ~0"
        print(f"  {label:26s} CPU {cpu:5.2f}%  ({ratio})  {bps / 1000:7.2f} KB/s  {'; '.join(verdict)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
