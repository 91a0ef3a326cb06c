"""A log line's Ray prefix said short: `(MegatronTrainRayActor pid=52001, ip=10.0.0.1)` becomes `train r0`.

Why: on a terminal under ~160 columns Ray's prefix takes half the line and says, in 40 to 90 characters, what
an operator reads as two words: the role the process plays (actors.role_of) and its training rank (miles'
bracket on the line, else what the log said about that process elsewhere: rank_map). Where no rank is known,
the role and the pid. Display only: search, filters and copy keep the line's own text.
"""

from __future__ import annotations

from collections.abc import Mapping

from backend.signals.actors import role_of
from backend.signals.store import LogLine

WIDTH = 10  # `train r127`: shorter labels are padded to it, so the ranks' messages start in one column


def compact_prefix(line: LogLine, ranks: Mapping[tuple[str, int], int]) -> str:
    """`train r3`, `rollout p51234`, `engine p4411`, `raylet`: the role, else the actor's class where the
    table of roles does not know it; `pid 4411` for Ray's class-less
    `(pid=N)` (a worker's setup, not the driver)."""
    known = line.actor is not None or line.proc is not None
    who = (role_of(line.actor, line.proc) if known else None) or line.actor
    rank = line.rank
    if rank is None and line.pid is not None:
        rank = ranks.get((line.ip or "", line.pid))
    if rank is not None:
        return f"{who} r{rank}" if who else f"rank {rank}"
    if line.pid is not None:
        return f"{who} p{line.pid}" if who else f"pid {line.pid}"
    return who or ""
