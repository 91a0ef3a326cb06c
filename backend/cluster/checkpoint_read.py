"""What a Megatron save directory holds: the tracker's iteration, every `iter_XXXXXXX/` and whether its save
finished. Stdlib only: the checkpoint job inlines it on the node that holds the directory.

Why "finished" is read from files: Megatron writes the tracker (`latest_checkpointed_iteration.txt`) after a
save, but a save killed half-way leaves a newer `iter_` directory, and a tracker can name a directory a later
crash or cleanup cut. A torch_dist save is complete when its finalize step wrote `metadata.json`
(dist_checkpointing.save's metadata_finalize_fn) beside `common.pt` and torch DCP's `.metadata`; a legacy save
when each `mp_rank_*` directory holds `model_optim_rng.pt`.
"""

from __future__ import annotations

import os
import re

TRACKER = "latest_checkpointed_iteration.txt"
ITER_DIR = re.compile(r"^iter_(\d{7,})$")
DIST_FILES = ("metadata.json", "common.pt", ".metadata")  # what the end of a torch_dist save leaves
LEGACY_FILE = "model_optim_rng.pt"
MAX_DIRS = 4096  # iteration dirs read at most (a save dir never holds more; a hostile one stays bounded)


def _tracker(root: str) -> tuple[int | None, str]:
    """The tracker's iteration (None: absent or unreadable) and its raw head for the report."""
    try:
        with open(os.path.join(root, TRACKER), encoding="utf-8", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None, ""
    return (int(text), text) if text.isdigit() else (None, text[:40])


def _missing(path: str) -> list[str]:
    """The end-of-save files `path` lacks ([] when complete)."""
    try:
        names = set(os.listdir(path))
    except OSError as err:
        return [f"unreadable: {err.strerror or err}"]
    ranks = sorted(n for n in names if n.startswith("mp_rank_"))
    if ranks and DIST_FILES[0] not in names:
        return _legacy_missing(path, ranks)
    return [n for n in DIST_FILES if n not in names]


def _legacy_missing(path: str, ranks: list[str]) -> list[str]:
    """A legacy (per-rank directory) save: the ranks whose model file is not there."""
    return [f"{r}/{LEGACY_FILE}" for r in ranks if not os.path.isfile(os.path.join(path, r, LEGACY_FILE))]


def _iterations(root: str) -> list[int]:
    found: list[int] = []
    with os.scandir(root) as entries:
        for entry in entries:
            match = ITER_DIR.match(entry.name)
            if match and entry.is_dir(follow_symlinks=False):
                found.append(int(match.group(1)))
            if len(found) >= MAX_DIRS:
                break
    return sorted(found)


def _iteration(root: str, it: int) -> dict[str, object]:
    """One iteration's report; `mtime` (epoch s) dates the save, for the time a failure lost after it."""
    path = os.path.join(root, f"iter_{it:07d}")
    try:
        mtime: float | None = os.stat(path).st_mtime
    except OSError:
        mtime = None
    return {"iteration": it, "missing": _missing(path), "mtime": mtime}


def read_save_dir(root: str) -> dict[str, object]:
    """The save dir's report: `exists`, `tracker`, `iterations` (oldest first: iteration, missing, mtime)."""
    if not os.path.isdir(root):
        return {"root": root, "exists": False, "tracker": None, "tracker_text": "", "iterations": []}
    tracker, text = _tracker(root)
    iterations = [_iteration(root, it) for it in _iterations(root)]
    return {"root": root, "exists": True, "tracker": tracker, "tracker_text": text, "iterations": iterations}
