"""The root, not the last symptom: of every failure a log holds, the earliest independent one is the cause;
the rest are its consequences.

A failing 128-GPU run prints dozens of errors: the OOM in one actor, then `RayTaskError` in the driver, the
job banner, the banner's replay of the tail, a wrapper's own error. Kinds say where they stand (catalog
`cascade`): a root failure beats a symptom (something reporting that another thing failed), which beats a
report of how the job ended; a kind that `yields_to` another seen for the same process is that one's
precursor. Among equals the earliest wins: by the lines' own timestamps where every candidate has one
(a log pasted newest-first is still read right), else by position.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.sanitize import one_line
from backend.signals.failures.catalog import FailureCatalog, FailureKind, default_catalog
from backend.signals.failures.events import FailureEvent

MAX_RANKS_SHOWN = 8
_ISO = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_OPTIONAL = ("on", "others", "at_start", "reason", "tags")


@dataclass(frozen=True, slots=True)
class Finding:
    """One failure as the operator reads it."""

    id: str
    title: str
    message: str
    role: str | None
    actor: str | None
    pid: str | None
    node: str | None
    rank: str | None
    gpu: str | None
    time: str | None
    line: str
    frame: str | None
    try_: str
    count: int
    seq: int  # the event's line number: with `id`, which event this finding words

    @property
    def key(self) -> tuple[str, int]:
        return (self.id, self.seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "message": self.message,
            "role": self.role,
            "actor": self.actor,
            "pid": self.pid,
            "node": self.node,
            "rank": self.rank,
            "gpu": self.gpu,
            "time": self.time,
            "line": self.line,
            "frame": self.frame,
            "try": self.try_,
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a run failed: its cause, what followed from it, and a doubt where Ray's verdict disagrees."""

    cause: Finding
    consequences: tuple[Finding, ...]
    doubt: str | None = None  # "Ray says the job succeeded, but …"

    def to_json(self) -> dict[str, Any]:
        return {
            **self.cause.to_json(),
            "consequences": [c.to_json() for c in self.consequences],
            "doubt": self.doubt,
        }

    @property
    def headline(self) -> str:
        return f"{self.cause.title}: {self.cause.message}"


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "" if key in _OPTIONAL else "?"


def render(
    event: FailureEvent, kind: FailureKind, *, world: int | None = None, ranks_seen: Sequence[int] = ()
) -> Finding:
    """The event in words: its kind's (or its pattern's) message with the event's fields filled in."""
    fields = _Fields(event.fields)
    node = event.fields.get("ip")
    fields["who"] = event.who
    fields["on"] = f" on {node}" if node else ""
    fields["role"] = event.role or "?"
    if event.error:
        fields["error"] = event.error
    fields["at_start"] = " at start (before the first rollout)" if event.at_start else ""
    ranks = event.collected.get("rank", [])
    if ranks:
        fields["ranks"] = _ranks_text(ranks)
        fields["others"] = _others(ranks, world, ranks_seen, folded=event.max_repeat - 1)
    template = event.template or kind.message
    message = one_line(template.format_map(fields))
    return Finding(
        id=kind.id,
        title=kind.title,
        message=message,
        role=event.role,
        actor=event.fields.get("actor"),
        pid=event.fields.get("pid"),
        node=node,
        rank=event.fields.get("rank"),
        gpu=event.fields.get("gpu"),
        time=event.time,
        line=event.line,
        frame=event.frame,
        try_=kind.what_to_try(event.role),
        count=event.count,
        seq=event.seq,
    )


def _ranks_text(ranks: Sequence[str]) -> str:
    ordered = sorted(ranks, key=lambda r: int(r) if r.isdigit() else 0)
    shown = ", ".join(ordered[:MAX_RANKS_SHOWN])
    return shown + (f" and {len(ordered) - MAX_RANKS_SHOWN} more" if len(ordered) > MAX_RANKS_SHOWN else "")


def _others(ranks: Sequence[str], world: int | None, ranks_seen: Sequence[int], *, folded: int = 0) -> str:
    """The ranks that did NOT time out: in a collective that hung, they are the suspects. Ray folds identical
    lines of other processes into `[repeated Nx]`: then the log holds how many timed out, not which."""
    timed_out = {int(r) for r in ranks if r.isdigit()}
    if folded > 0:
        quiet_n = world - len(timed_out) - folded if world else 0
        if quiet_n > 0:
            return (
                f"; about {quiet_n} of {world} rank(s) did not time out, but Ray folded {folded} watchdog "
                "line(s), so the log cannot say which: dump the job's stacks"
            )
        return (
            f"; Ray folded {folded} more watchdog line(s), so which ranks did not time out is not in the "
            "log: dump the job's stacks"
        )
    known = set(ranks_seen) | (set(range(world)) if world else set())
    quiet = sorted(known - timed_out)
    if not quiet:
        return "; every rank the log names timed out (the one that did not is not in the log)"
    shown = ", ".join(str(r) for r in quiet[:MAX_RANKS_SHOWN])
    more = f" and {len(quiet) - MAX_RANKS_SHOWN} more" if len(quiet) > MAX_RANKS_SHOWN else ""
    return f"; rank(s) {shown}{more} did not time out: look there first"


def _same_process(a: FailureEvent, b: FailureEvent) -> bool:
    if a.pid is not None and b.pid is not None:
        return a.pid == b.pid
    return a.who == b.who


def _order(pool: Sequence[FailureEvent]) -> list[FailureEvent]:
    if all(e.time is not None and _ISO.match(e.time) for e in pool):
        return sorted(pool, key=lambda e: (str(e.time).replace("T", " ").replace(",", "."), e.seq))
    return sorted(pool, key=lambda e: e.seq)


def diagnose(
    events: Sequence[FailureEvent],
    catalog: FailureCatalog | None = None,
    *,
    world: int | None = None,
    ranks_seen: Sequence[int] = (),
    succeeded: bool = False,
) -> Diagnosis | None:
    """The cause and its consequences, or None when the log holds no failure."""
    if not events:
        return None
    catalog = catalog or default_catalog()
    kinds = {k.id: k for k in catalog.kinds}

    def yields(event: FailureEvent) -> bool:
        kind = kinds[event.kind]
        return any(
            o is not event
            and ((o.kind in kind.yields_to and _same_process(event, o)) or o.kind in kind.yields_to_any)
            for o in events
        )

    tiers = (
        [e for e in events if kinds[e.kind].cascade == "root" and not yields(e)],
        [e for e in events if kinds[e.kind].cascade == "symptom"],
        [e for e in events if kinds[e.kind].cascade == "report"],
        list(events),
    )
    pool = next(tier for tier in tiers if tier)
    cause = _order(pool)[0]
    rest = [e for e in sorted(events, key=lambda e: e.seq) if e is not cause]

    def word(e: FailureEvent) -> Finding:
        return render(e, kinds[e.kind], world=world, ranks_seen=ranks_seen)

    doubt = None
    if succeeded:
        doubt = (
            f"Ray says the job succeeded, but the log says {kinds[cause.kind].title.lower()}: "
            "check that the run did what it should"
        )
    return Diagnosis(word(cause), tuple(word(e) for e in rest), doubt)
