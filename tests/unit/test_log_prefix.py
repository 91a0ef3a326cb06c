"""Ray's actor prefix said short (`train r3`), from real log shapes (reference/miles-log-formats.md §1): the
role from the actor table, the rank from the line's bracket or from what the log said about that process."""

from __future__ import annotations

from pathlib import Path

from backend.signals.log_prefix import compact_prefix
from backend.signals.rank_map import process_ranks
from backend.signals.store import LogStore

LINES = [
    "(MegatronTrainRayActorWithConcurrencyGroups pid=4101, ip=10.0.0.3) [2026-10-02 10:00:05.120 "
    "actor_cell0_rank3] log_utils.py:544 - step 6: {'train/loss': 0.012}",
    "(MegatronTrainRayActorWithConcurrencyGroups pid=4101, ip=10.0.0.3) a print of rank 3, no bracket",
    "(MegatronTrainRayActor pid=4102) [2026-03-02 10:00:05] log_utils.py:443 - step 6: {'train/loss': 0.012}",
    "(RolloutManager pid=51234, ip=10.0.0.1) [2026-03-02 10:00:05] rollout.py:1132 - rollout 3: {}",
    "(SGLangEngine pid=7001, ip=10.0.0.4) [2026-03-02 10:00:05 TP4 EP4] Decode batch",
    "(pid=9001) worker setup hook ran",
    "(raylet, ip=10.0.0.5) A worker died or was killed while executing a task",
    "(MyOwnActor pid=8001) something of the operator's own",
]


def test_role_and_rank_else_role_and_pid(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "spool", run_id="t")
    store.append("\n".join(LINES) + "\n")
    ranks = process_ranks(LINES)
    shown = [compact_prefix(store.line(i), ranks) for i in range(len(LINES))]
    assert shown == [
        "train r3",
        "train r3",  # the same process's bracket said its rank on another line
        "train p4102",  # the 2026-04 shape: no rank anywhere
        "rollout p51234",
        "engine p7001",
        "pid 9001",
        "raylet",
        "MyOwnActor p8001",
    ]
    assert all(len(s) < len(store.line(i).text.split(")")[0]) for i, s in enumerate(shown))
