"""A SIMULATED stand-in for miles' `train.py`: no model, no GPU, same outside behaviour.

Why: the console must be exercised against a real Ray cluster without GPUs or miles. This
package is run exactly like miles (`python3 <SIM_TRAIN_SCRIPT> <miles argv>`, or
`python -m backend.demo.simtrainer ...`), starts real Ray actors named `RolloutManager` and
`MegatronTrainRayActor` (one train actor per node, holding that node's GPUs), and prints miles'
log lines and metric lines (shared/reference/miles-run-output.md §2-3) so they reach the job log
with Ray's real prefixes. Its first log line, its actor log lines and its checkpoint markers say
it is a simulation. Extra `--sim-*` flags (see `args.py`) make it fail, ignore signals, run
forever or leak a GPU-holding process.
"""

from __future__ import annotations

from pathlib import Path

SIM_TRAIN_SCRIPT = str(Path(__file__).resolve().with_name("train.py"))
SIM_LABEL = "SIMULATED TRAINER (ultra-console simtrainer, not miles)"
FAKEGPU_PATH = str(Path(__file__).resolve().with_name("fakegpu"))


def is_simulated(train_script: str | None) -> bool:
    """True when a spec's `paths.train_script` points at this simulator (label runs and jobs)."""
    return bool(train_script) and Path(str(train_script)).parent.name == "simtrainer"
