"""The checkpoint a resumed run loads: read on the node(s) that hold the failed run's save directory.

The save dir is read by a pinned node job (checkpoint_job.py): the failed run's driver node first, then
every other alive node, until one holds the directory (a shared file system answers on the first). The
newest complete iteration is used; a newer one that a crash cut short is named and skipped, and a run that
never saved gets a fresh start, said as such. `rollback` goes that many complete saves further back (a
divergence may already be in the last one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.cluster.checkpoint_job import MARK
from backend.cluster.dashboard import RayClient
from backend.cluster.node_job import run_node_job
from backend.errors import ConsoleError
from backend.json_fields import Fields

JOB_SCRIPT = Path(__file__).with_name("checkpoint_job.py")
JOB_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class PartialSave:
    """An iteration directory whose save never finished: what it lacks."""

    iteration: int
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckpointChoice:
    """What `--load` gets: the save dir and iteration (None: a fresh start), and why."""

    save_dir: str | None
    iteration: int | None
    tracker: int | None  # what latest_checkpointed_iteration.txt says
    partial: tuple[PartialSave, ...]  # newer saves skipped, newest first
    node: str | None  # the node the directory was read on
    note: str
    saved_at: float | None = None  # when the chosen iteration was saved (epoch s; its directory's mtime)

    @property
    def fresh(self) -> bool:
        return self.iteration is None

    def to_json(self) -> dict[str, Any]:
        return {
            "save_dir": self.save_dir,
            "iteration": self.iteration,
            "tracker": self.tracker,
            "fresh_start": self.fresh,
            "partial": [{"iteration": p.iteration, "missing": list(p.missing)} for p in self.partial],
            "node": self.node,
            "note": self.note,
            "saved_at": self.saved_at,
        }


def no_save_dir(note: str) -> CheckpointChoice:
    return CheckpointChoice(None, None, None, (), None, note)


def _partials(iterations: list[Fields]) -> tuple[list[int], list[PartialSave]]:
    complete, partial = [], []
    for item in iterations:
        it, missing = item.whole("iteration"), [str(m) for m in item.items("missing")]
        if it is None:
            continue
        if missing:
            partial.append(PartialSave(it, tuple(missing)))
        else:
            complete.append(it)
    return complete, partial


def _note(used: int | None, tracker: int | None, skipped: list[PartialSave], rollback: int) -> str:
    if used is None:
        cut = f"; the save of iteration {skipped[0].iteration} never finished" if skipped else ""
        return f"no complete checkpoint: a fresh start{cut}"
    parts = [f"iteration {used}"]
    for p in skipped:
        parts.append(f"iteration {p.iteration} is partial (lacks {', '.join(p.missing[:3])}): skipped")
    if rollback:
        parts.append(f"rolled back {rollback} save(s) past the last complete one")
    if tracker is not None and tracker != used and not skipped and not rollback:
        parts.append(f"the tracker says {tracker}")
    return "; ".join(parts)


def _split_by_tracker(
    complete: list[int], partial: list[PartialSave], tracker: int | None
) -> tuple[list[int], list[PartialSave]]:
    """A directory newer than the tracker is a save the crash cut, whatever it holds."""
    if tracker is None:
        return complete, partial
    cut = [PartialSave(it, ("the tracker's update",)) for it in complete if it > tracker]
    return [it for it in complete if it <= tracker], partial + cut


def _saved_at(report: Fields, used: int | None) -> float | None:
    """The chosen iteration's directory mtime (epoch s)."""
    return next((i.number("mtime") for i in report.objs("iterations") if i.whole("iteration") == used), None)


def choose(report: Fields, rollback: int = 0, node: str | None = None) -> CheckpointChoice:
    """The iteration to load from one save-dir report (checkpoint_read.read_save_dir's JSON)."""
    root = report.text("root") or None
    if not report.has("exists"):
        return CheckpointChoice(root, None, None, (), node, "the run never saved: a fresh start")
    tracker = report.whole("tracker")
    complete, partial = _split_by_tracker(*_partials(report.objs("iterations")), tracker)
    kept = complete[: len(complete) - rollback] if rollback else complete
    used = kept[-1] if kept else None
    skipped = sorted((p for p in partial if used is None or p.iteration > used), key=lambda p: -p.iteration)
    note = _note(used, tracker, skipped, rollback)
    return CheckpointChoice(root, used, tracker, tuple(skipped), node, note, _saved_at(report, used))


async def read_on_node(client: RayClient, node_id: str, save_dir: str) -> Fields | None:
    """The save dir's report as `node_id` sees it; None when the job could not answer."""
    try:
        result = await run_node_job(
            client, node_id, JOB_SCRIPT, [save_dir], mark=MARK, purpose="checkpoint", timeout_s=JOB_TIMEOUT_S
        )
    except ConsoleError:
        return None
    return next((e for e in result.events if e.text("root") == save_dir), None)


async def find_checkpoint(
    client: RayClient, save_dir: str | None, nodes: Iterable[str], rollback: int = 0
) -> CheckpointChoice:
    """The checkpoint to resume from, read on `nodes` in order (the first that holds `save_dir` answers)."""
    if not save_dir:
        return no_save_dir("the run saved no checkpoints (no --save): a fresh start")
    asked: list[str] = []
    for node_id in dict.fromkeys(n for n in nodes if n):
        report = await read_on_node(client, node_id, save_dir)
        asked.append(node_id[:8])
        if report is not None and report.has("exists") and report.value("exists"):
            return choose(report, rollback, node_id)
    where = f" on node(s) {', '.join(asked)}" if asked else " (no node to read it on)"
    return CheckpointChoice(
        save_dir,
        None,
        None,
        (),
        None,
        f"the run never saved: {save_dir} does not exist{where}: a fresh start",
    )
