"""miles' snapshot and restore of the event log alongside model checkpoints (event_logger/checkpoint.py).

Why: a resumed run must not keep the abandoned attempt's events after its checkpoint. miles copies
`{dump_details}/events` into `{save}/iter_XXXXXXX/debug_events` at each save; a run started with `--load`
of such a checkpoint moves the live `events/` aside as `{dump_details}/.trash_<YYYYmmdd_HHMMSS>_<hex8>`
and copies the checkpoint's snapshot in its place, then appends to it. A reader tailing `events/` sees
its files replaced by shorter copies whose lines it has already read.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from backend.demo.simtrainer.milog import EVENTS_DIR, MilesLog

TRACKER = "latest_checkpointed_iteration.txt"
SNAPSHOT_DIR = "debug_events"


def snapshot_dir(checkpoint_root: Path, iteration: int) -> Path:
    return checkpoint_root / f"iter_{iteration:07d}" / SNAPSHOT_DIR


def snapshot(dump_details: str | None, save: str | None, iteration: int, log: MilesLog) -> None:
    if dump_details is None or save is None:
        return
    src = Path(dump_details) / EVENTS_DIR
    if not src.is_dir():
        return
    dst = snapshot_dir(Path(save), iteration)
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    log.at("checkpoint.py:33", f"Snapshotted event dir {src} -> {dst}")


def checkpoint_iteration(load: str | None, step: int | None = None) -> int | None:
    """The iteration Megatron loads: `--ckpt-step` when given, else the one in
    `{load}/latest_checkpointed_iteration.txt`; None without a checkpoint."""
    if load is None:
        return None
    if step is not None:
        return step if (Path(load) / f"iter_{step:07d}").is_dir() else None
    try:
        return int((Path(load) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


def restore(dump_details: str | None, load: str | None, log: MilesLog, step: int | None = None) -> int | None:
    """Put the checkpoint's event snapshot in place of the live event dir; returns the iteration resumed."""
    iteration = checkpoint_iteration(load, step)
    if dump_details is None or load is None or iteration is None:
        return iteration
    src = snapshot_dir(Path(load), iteration)
    if not src.is_dir():
        return iteration
    dst = Path(dump_details) / EVENTS_DIR
    if dst.exists():
        trash = dst.parent / f".trash_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:8]}"
        dst.rename(trash)
        log.at("checkpoint.py:52", f"Moved pre-restore event dir {dst} -> {trash}")
    shutil.copytree(src, dst)
    log.at("checkpoint.py:56", f"Restored event dir {dst} <- {src}")
    return iteration
