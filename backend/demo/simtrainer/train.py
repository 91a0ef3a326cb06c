"""Script form of the simulated trainer, usable as `paths.train_script` (`python3 train.py ...`)."""

import sys
from pathlib import Path

_here = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p not in ("", _here)]  # no shadowing by sibling modules
try:
    from backend.demo.simtrainer.driver import main
except ImportError:  # not installed: run from a source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from backend.demo.simtrainer.driver import main

sys.exit(main())
