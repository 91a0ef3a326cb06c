"""Rule-engine benchmark: one full `check(spec)` + `layout_figures(spec)` per preset, and the same for a
layout that breaks many rules (fixes are built only when rules fire). Figures are medians over many runs,
printed in µs and as ratios against baselines measured in the same run:

* `spec.model_copy(deep=True)` — what copying the spec the plan form edits costs;
* `RunSpec.model_validate(dump)` — one pydantic validation of the same spec (what a keystroke already pays).

Target: check + derive <= 1 ms per spec (the plan form re-checks on every keystroke).

Usage: .venv/bin/python bench/bench_constraints.py [--runs 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.plan.checks import check  # noqa: E402
from backend.plan.derived import layout_figures  # noqa: E402
from backend.plan.spec import RunSpec, build_spec  # noqa: E402

TARGET_US = 1000.0
BROKEN = [
    "train.tp=16",
    "train.pp=5",
    "train.ep=64",
    "rollout.dp=3",
    "batch.global_batch_size=130",
    "train.sequence_parallel=false",
    "rollout.gpus_per_engine=8",
    "rollout.ep=8",
]


def median_us(fn: Callable[[], object], runs: int, batch: int = 10) -> float:
    """Median of `runs // batch` timings of `batch` calls each, per call, in µs."""
    samples = []
    for _ in range(max(1, runs // batch)):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3000)
    args = ap.parse_args()

    cases = {
        "full (16x8)": build_spec("nemotron-3-ultra-550b-a55b"),
        "slice (1x8)": build_spec("nemotron-3-ultra-550b-a55b-4layer"),
        "full, 8 rules broken": build_spec("nemotron-3-ultra-550b-a55b", BROKEN),
    }
    worst = 0.0
    print(
        f"{'spec':24} {'findings':>8} {'check':>9} {'derive':>9} {'both':>9} {'vs copy':>8} {'vs validate':>11}"
    )
    for name, spec in cases.items():
        dump = spec.model_dump()
        for _ in range(200):  # warm caches (pattern counts, divisors)
            check(spec)
            layout_figures(spec)
        t_check = median_us(lambda s=spec: check(s), args.runs)
        t_derive = median_us(lambda s=spec: layout_figures(s), args.runs)
        t_both = median_us(lambda s=spec: (check(s), layout_figures(s)), args.runs)
        t_copy = median_us(lambda s=spec: s.model_copy(deep=True), args.runs)
        t_valid = median_us(lambda d=dump: RunSpec.model_validate(d), args.runs)
        worst = max(worst, t_both)
        print(
            f"{name:24} {len(check(spec)):>8} {t_check:>7.1f}µs {t_derive:>7.1f}µs {t_both:>7.1f}µs "
            f"{t_both / t_copy:>7.2f}x {t_both / t_valid:>10.2f}x"
        )
        print(f"{'':24} baselines: model_copy(deep) {t_copy:.1f}µs, model_validate {t_valid:.1f}µs")
    verdict = "OK" if worst <= TARGET_US else "OVER TARGET"
    print(
        f"worst check+derive {worst:.1f}µs = {worst / TARGET_US:.3f} of the {TARGET_US:.0f}µs target: {verdict}"
    )
    return 0 if worst <= TARGET_US else 1


if __name__ == "__main__":
    raise SystemExit(main())
