"""Every process name the console knows, by role, as one table (`configs/actors.toml`).

Why a table: miles renamed its actors between versions (`RolloutManager` became `RolloutExecutor`,
`MegatronTrainRayActor` gained `WithConcurrencyGroups`), other frameworks' logs name their own engines
(`SGLangHttpServer`, `LLMRayActor`), and the console uses actor names in filters, in alerts (which actor
ran out of memory), in the diagnosis (the role of the actor that died) and in attributing the shim's line to
train actors. Each place asks this table by role, so a new name is one row there, never a second spelling.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TRAIN, ROLLOUT, ENGINE, DRIVER, HELPER = "train", "rollout", "engine", "driver", "helper"
ROLES = (TRAIN, ROLLOUT, ENGINE, DRIVER, HELPER)


@dataclass(frozen=True, slots=True)
class ActorName:
    """A Ray actor class (as Ray's line prefix shows it) and the role it plays in a run."""

    name: str
    role: str
    seen_in: str  # which framework and versions print it


@dataclass(frozen=True, slots=True)
class ActorTable:
    """The names by role, the shapes of names no row has, miles' bracket names, where frames tell a role."""

    names: tuple[ActorName, ...]
    shapes: tuple[tuple[re.Pattern[str], str], ...]
    procs: tuple[tuple[re.Pattern[str], str], ...]
    frames: tuple[tuple[str, str], ...]  # (a path part, the role of code there)
    internal: tuple[str, ...]  # path parts of machinery frames (runpy, Ray, asyncio)


def _load() -> ActorTable:
    data = tomllib.loads(resources.files("configs").joinpath("actors.toml").read_text(encoding="utf-8"))
    for row in (*data["actor"], *data["actor_shape"], *data["proc"], *data["frame"]):
        if row["role"] not in ROLES:  # the shipped table is checked at import: a typo fails every test
            raise ValueError(f"configs/actors.toml: unknown role {row['role']!r}")
    return ActorTable(
        names=tuple(ActorName(a["name"], a["role"], a["seen_in"]) for a in data["actor"]),
        shapes=tuple((re.compile(s["re"]), s["role"]) for s in data["actor_shape"]),
        procs=tuple((re.compile(p["re"]), p["role"]) for p in data["proc"]),
        frames=tuple((f["path"], f["role"]) for f in data["frame"]),
        internal=tuple(data["internal"]["frames"]),
    )


TABLE = _load()
ACTOR_NAMES = TABLE.names
_BY_NAME = {a.name: a for a in ACTOR_NAMES}


def _by_shape(actor: str) -> str | None:
    return next((role for pattern, role in TABLE.shapes if pattern.fullmatch(actor)), None)


def role_of(actor: str | None, proc: str | None = None) -> str | None:
    """The role of a line's process: from Ray's actor class (a row, else its shape), else miles' bracket
    name; None if unknown. A line without a Ray prefix comes from the driver."""
    if actor is not None:
        known = _BY_NAME.get(actor)
        if known is not None:
            return known.role
        shaped = _by_shape(actor)
        if shaped is not None:
            return shaped
    if proc is not None:
        for pattern, role in TABLE.procs:
            if pattern.fullmatch(proc):
                return role
    return DRIVER if actor is None and proc is None else None


def names_for(role: str) -> tuple[str, ...]:
    """Every actor class name of one role, all versions and frameworks."""
    return tuple(a.name for a in ACTOR_NAMES if a.role == role)


def frame_role(path: str) -> str | None:
    """The role of the code at `path` (Megatron's forward is the train side's, SGLang's the engine's)."""
    return next((role for part, role in TABLE.frames if part in path), None)


def is_internal(path: str) -> bool:
    """A frame of the machinery (runpy, Ray's workers, asyncio), never the place where it broke."""
    return any(part in path for part in TABLE.internal)
