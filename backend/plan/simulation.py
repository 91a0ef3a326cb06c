"""Whether a spec launches the simulated trainer: the plan labels such runs and jobs as simulations wherever
they appear. The rule lives here, below the demo that provides the simulator (the demo imports it)."""

from __future__ import annotations

from pathlib import Path

SIM_PACKAGE = "simtrainer"  # the simulated trainer's package directory (backend/demo/simtrainer)


def is_simulated(train_script: str | None) -> bool:
    """True when a spec's `paths.train_script` points at the simulator."""
    return bool(train_script) and Path(str(train_script)).parent.name == SIM_PACKAGE
