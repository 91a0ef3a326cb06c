"""Cost of `plan --deep` and of the shim, as ratios against our own rule engine in the same run.

Run in the oracle venv:  .venv-deep/bin/python bench/bench_deep.py [N]

- baseline: backend.plan.checks.check(spec) per layout (what `plan` costs);
- deep: backend.plan.deep.run_deep_checks(spec) per layout, after one warm-up (library imports excluded),
  broken down per real-library check;
- shim: expected_provider_fields on the Ultra config, and one CPU provider build with the shim
  (shim-check's work) against the same build without it.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.plan import checks as constraints  # noqa: E402
from backend.plan import deep  # noqa: E402
from backend.plan.spec import build_spec  # noqa: E402


def per_call(fn, items) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - start) / len(items)


def main(n: int = 40) -> None:
    from deep_layouts import layouts  # the differential test's seeded layouts

    specs = [build_spec(preset, sets) for preset, sets in layouts()[:n]]
    deep.run_deep_checks(specs[0])  # warm-up: library imports
    base = per_call(constraints.check, specs)
    full = per_call(deep.run_deep_checks, specs)
    print(
        f"layouts {len(specs)}: constraints.check {base * 1e3:.2f} ms, run_deep_checks {full * 1e3:.1f} ms "
        f"(x{full / base:.0f})"
    )
    for name, fn in deep.CHECKS:
        t = per_call(lambda s, fn=fn, name=name: deep.run_one(name, fn, s), specs)
        print(f"  {name:26} {t * 1e3:7.1f} ms  (x{t / base:.0f} of the engine)")

    from deep_layouts import FULL, SLICE

    from shim.check import run_check
    from shim.mapping import expected_provider_fields

    cfg = deep.hf_config(build_spec(FULL, []))  # Ultra's config.json as the checks synthesize it
    mapping = per_call(lambda _: expected_provider_fields(cfg, keep_mtp=False), range(2000))
    print(f"expected_provider_fields (Ultra) {mapping * 1e6:.1f} us (x{mapping / base:.2f} of the engine)")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp)  # a 4-layer slice of Ultra: real widths, no weights
        (ckpt / "config.json").write_text(json.dumps(deep.hf_config(build_spec(SLICE, []))), encoding="utf-8")
        run_check(ckpt, with_shim=True)  # warm-up
        times = {}
        for with_shim in (False, True):
            times[with_shim] = statistics.median(
                per_call(lambda _, w=with_shim: run_check(ckpt, with_shim=w), range(5)) for _ in range(3)
            )
        print(
            f"CPU provider build: without shim {times[False] * 1e3:.1f} ms, with shim "
            f"{times[True] * 1e3:.1f} ms (x{times[True] / times[False]:.2f})"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
