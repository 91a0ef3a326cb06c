"""A SIMULATED stand-in for miles' `train.py`: no model, no GPU, same outside behaviour.

Why: the console must be exercised against a real Ray cluster without GPUs or miles. This
package is run exactly like miles (`python3 <SIM_TRAIN_SCRIPT> <miles argv>`, or
`python -m backend.demo.simtrainer ...`), starts real Ray actors with miles' class names (one train
actor per node, holding that node's GPUs), and prints miles' log lines and metric lines so they
reach the job log with Ray's real prefixes (and Ray's own `[repeated Nx across cluster]` folding).
With `--dump-details` it writes miles' event log, with `--use-miles-dashboard` miles' dashboard
streams. Its first log line, its actor log lines and its checkpoint markers say it is a simulation.
Extra `--sim-*` flags (see `args.py`; `run.extra_args` of a spec, or `ultra-console demo` options,
carry them) pick the miles version's log shape (`--sim-log-format newest|2026-04|bare`), make it
die the ways real runs die, printed as the real libraries print it (`--sim-fail train-oom|engine-start|
host-oom|nccl-timeout`, deaths.py), print unreadable metric lines, ignore signals, run forever or leak a
GPU-holding process.
"""

from __future__ import annotations

from pathlib import Path

from backend.plan.simulation import is_simulated

__all__ = ["FAKEGPU_PATH", "SIM_LABEL", "SIM_TRAIN_SCRIPT", "is_simulated"]

SIM_TRAIN_SCRIPT = str(Path(__file__).resolve().with_name("train.py"))
SIM_LABEL = "SIMULATED TRAINER (ultra-console simtrainer, not miles)"
FAKEGPU_PATH = str(Path(__file__).resolve().with_name("fakegpu"))
