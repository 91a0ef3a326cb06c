"""One failure as the log said it: a kind, where it happened, the line, and how often it was said."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class FailureEvent:
    """A sighting of one catalog kind, merged with its repeats (a replayed tail, `[repeated Nx]`, the same
    traceback printed twice). Mutable only inside the scanner; `frozen()` hands out a copy."""

    kind: str
    seq: int  # the line's number in the log: the order failures happened in, where no timestamp says
    fields: dict[str, str]  # the pattern's named groups and the process's facts (actor, pid, ip, rank, tags)
    role: str | None  # train | rollout | engine | driver | helper, where the log says
    who: str  # the process, as an operator reads it ("MegatronTrainRayActor pid=4101 on 10.0.0.3")
    time: str | None  # the line's own timestamp, as printed
    line: str  # the line that said it (sanitised, cut)
    frame: str | None = None  # the traceback's innermost frame (`file:line in func`)
    error: str | None = None  # the exception line that completed a kind that opens a traceback
    at_start: bool = False  # before the run's first metric line
    count: int = 1
    max_repeat: int = 1  # the most lines Ray folded into one sighting (`[repeated Nx across cluster]`)
    named: bool = False  # the line named the failing actor itself (not only the process that printed it)
    template: str | None = None  # the matched pattern's own message, where it has one
    collected: dict[str, list[str]] = field(default_factory=dict)

    def frozen(self) -> FailureEvent:
        return dataclasses.replace(
            self, fields=dict(self.fields), collected={k: list(v) for k, v in self.collected.items()}
        )

    @property
    def pid(self) -> str | None:
        return self.fields.get("pid")

    @property
    def node(self) -> str | None:
        return self.fields.get("ip")
