"""Every miles/slime process name the console knows, by role, as one table.

Why a table: miles renamed its actors between versions (`RolloutManager` became `RolloutExecutor`,
`MegatronTrainRayActor` gained `WithConcurrencyGroups`), and the console uses actor names in filters, in
alerts (which actor ran out of memory) and in attributing the shim's line to train actors. Each place asks
this table by role, so a new name is one row here and never a second spelling elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TRAIN, ROLLOUT, ENGINE, DRIVER, HELPER = "train", "rollout", "engine", "driver", "helper"
ROLES = (TRAIN, ROLLOUT, ENGINE, DRIVER, HELPER)


@dataclass(frozen=True, slots=True)
class ActorName:
    """A Ray actor class (as Ray's line prefix shows it) and the role it plays in a run."""

    name: str
    role: str
    seen_in: str  # which versions print it


ACTOR_NAMES: tuple[ActorName, ...] = (
    ActorName("MegatronTrainRayActor", TRAIN, "miles 2025 to mid 2026"),
    ActorName("MegatronTrainRayActorWithConcurrencyGroups", TRAIN, "miles Sept 2026"),
    ActorName("_FtTrainRayActor", TRAIN, "miles with --use-fault-tolerance"),
    ActorName("FSDPTrainRayActor", TRAIN, "miles FSDP backend"),
    ActorName("TrainRayActor", TRAIN, "slime 2025"),
    ActorName("RolloutManager", ROLLOUT, "miles to mid 2026"),
    ActorName("RolloutExecutor", ROLLOUT, "miles Sept 2026"),
    ActorName("RolloutRayActor", ROLLOUT, "slime 2025"),
    ActorName("Buffer", ROLLOUT, "slime 2025"),
    ActorName("SGLangEngine", ENGINE, "every version"),
    ActorName("CommandActor", HELPER, "miles"),
    ActorName("DashboardCollector", HELPER, "miles dashboard"),
    ActorName("GpuSampler", HELPER, "miles dashboard"),
    ActorName("_PrometheusCollector", HELPER, "miles"),
    ActorName("InfoActor", HELPER, "miles"),
)

# miles' bracket names (the newest format only) by role: `actor_cell0_rank3`, `rollout_manager`, ...
PROC_ROLES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:actor|critic)_cell\d+_rank\d+"), TRAIN),
    (re.compile(r"rollout_(?:manager|executor)"), ROLLOUT),
    (re.compile(r"main"), DRIVER),
    (re.compile(r"(?:miles_)?router|session_server"), HELPER),
)

_BY_NAME = {a.name: a for a in ACTOR_NAMES}


def role_of(actor: str | None, proc: str | None = None) -> str | None:
    """The role of a line's process: from Ray's actor class, else miles' bracket name; None if unknown.

    A line without a Ray prefix comes from the driver."""
    if actor is not None:
        known = _BY_NAME.get(actor)
        if known is not None:
            return known.role
    if proc is not None:
        for pattern, role in PROC_ROLES:
            if pattern.fullmatch(proc):
                return role
    return DRIVER if actor is None and proc is None else None


def names_for(role: str) -> tuple[str, ...]:
    """Every actor class name of one role, all versions."""
    return tuple(a.name for a in ACTOR_NAMES if a.role == role)
