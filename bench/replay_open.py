"""Open a 1M-line miles log with `ultra-console replay` and with toolong, side by side in one run, each in a
real terminal (tmux), and time what the operator sees.

Figures (medians of ROUNDS alternating runs, as ratios replay / toolong measured in this same run):
- first content: spawn until a line of the log is on screen;
- scroll: a page-down pressed right after first content, until the screen changes (replay is still
  reading the rest of the log and filling charts then: this is the "can already scroll" figure);
- charts (replay only): spawn until the Run view's throughput chart is drawn with data, and until the
  whole log is read.

toolong is not a project dependency: install it in a separate venv (it pins an old Textual), e.g.
`python3 -m venv .venv-toolong && .venv-toolong/bin/pip install toolong`, or pass --toolong PATH.
Run: `.venv/bin/python bench/replay_open.py [--lines 1000000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.demo import sample_log as miles_sample_log  # noqa: E402

SOCKET = "bench-replay-open"
SIZE = (200, 50)
POLL_S = 0.01
LOG_TEXT = ("Decode batch", "placement group")


def make_log(path: Path, lines: int) -> int:
    """A miles log of about `lines` lines (the tests' faithful fake), cached between runs."""
    if path.exists():
        return path.read_bytes().count(b"\n")
    per_rollout = 2000
    run = miles_sample_log.SampleRun(
        rollouts=max(1, lines // int(per_rollout * 1.2 + 15)), noise_per_rollout=per_rollout, train_ranks=8
    )
    miles_sample_log.write(path, run)
    return path.read_bytes().count(b"\n")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=False).stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_for(name: str, test, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if test(screen(name)):
            return time.monotonic()
        time.sleep(POLL_S)
    raise TimeoutError(f"{name}: condition not met in {timeout:.0f} s; screen:\n{screen(name)}")


def has_log(text: str) -> bool:
    return any(t in text for t in LOG_TEXT)


def open_one(name: str, command: list[str], *, replay: bool) -> dict[str, float]:
    env = "TERM=xterm-256color COLORTERM=truecolor"
    t0 = time.monotonic()
    tmux(
        "new-session", "-d", "-s", name, "-x", str(SIZE[0]), "-y", str(SIZE[1]), f"{env} {' '.join(command)}"
    )
    out: dict[str, float] = {}
    try:
        first = wait_for(name, has_log)
        out["first_content_s"] = first - t0
        before = screen(name)
        tmux("send-keys", "-t", name, "PageDown")
        out["scroll_s"] = wait_for(name, lambda s: s != before and has_log(s)) - first
        if replay:
            tmux("send-keys", "-t", name, "2")
            out["charts_s"] = (
                wait_for(
                    name, lambda s: "throughput" in s and "waiting for metrics" not in s and "tok/s" in s
                )
                - t0
            )
            out["loaded_s"] = wait_for(name, lambda s: "reading history" not in s.splitlines()[0], 300) - t0
    finally:
        tmux("kill-session", "-t", name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--log", type=Path, default=Path("/tmp/bench-replay-open.log"))
    ap.add_argument("--toolong", default=str(REPO / ".venv-toolong" / "bin" / "tl"))
    ap.add_argument(
        "--baseline-less",
        action="store_true",
        help="without toolong: `less -S` as the baseline (a pager's first page: harsher than toolong)",
    )
    args = ap.parse_args()
    if not shutil.which("tmux") or not (Path(args.toolong).exists() or args.baseline_less):
        sys.exit("needs tmux and toolong (see the module docstring), or --baseline-less")
    # As installed (pip writes bytecode): toolong's venv has its .pyc files; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would compile ~600 modules at every start and time the compiler.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for package in ("backend", "console", "shim"):
        compileall.compile_dir(REPO / package, quiet=1)
    n = make_log(args.log, args.lines)
    print(f"log: {n:,} lines, {args.log.stat().st_size / 1e6:.0f} MB")
    replay = [sys.executable, "-m", "console.cli", "replay", str(args.log)]
    toolong = [args.toolong, str(args.log)] if not args.baseline_less else ["less", "-S", str(args.log)]
    print("baseline:", " ".join(toolong[:-1]))
    results: dict[str, list[dict[str, float]]] = {"replay": [], "toolong": []}
    for i in range(args.rounds):
        for name, cmd in (
            (("replay", replay), ("toolong", toolong))
            if i % 2 == 0
            else (("toolong", toolong), ("replay", replay))
        ):
            r = open_one(f"{name}{i}", cmd, replay=name == "replay")
            results[name].append(r)
            print(f"round {i + 1} {name:8s} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()))
    med = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()
    }
    print("medians:", med)
    for key in ("first_content_s", "scroll_s"):
        print(f"{key}: replay / toolong = {med['replay'][key] / med['toolong'][key]:.2f}")
    print(
        f"charts filled at {med['replay']['charts_s'] / med['toolong']['first_content_s']:.2f}x toolong's "
        "first content; whole log read at "
        f"{med['replay']['loaded_s'] / med['toolong']['first_content_s']:.2f}x"
    )
    tmux("kill-server")


if __name__ == "__main__":
    main()
