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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backend.sanitize import one_line
from backend.signals.failures.catalog import FailureCatalog, FailureKind, default_catalog
from backend.signals.failures.events import FailureEvent

MAX_RANKS_SHOWN = 8
_ISO = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_CLOCK = re.compile(r"\d\d:\d\d:\d\d")
_OPTIONAL = ("on", "others", "at_start", "reason", "tags", "also_failed", "usage")


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
    global_rank: int | None = None  # torch's `[rankN]:` tag: the rank in the world (default) group
    group: str | None = None  # the process group a NCCL line names (`PG ID 2 PG GUID 11(TP_GROUP)`)
    group_rank: int | None = None  # the rank inside that group (`[Rank 4]`), never reported as global
    unknown_ranks: tuple[int, ...] = ()  # ranks the log cannot say anything about (cut, folded, absent)
    owner: str | None = None  # the process that owned the dead actor, where Ray named it apart from the actor

    @property
    def key(self) -> tuple[str, int]:
        return (self.id, self.seq)

    @property
    def headline(self) -> str:
        """The kind's title before the message, said once where the message already starts with it."""
        if self.message.lower().startswith(self.title.lower()):
            return self.message
        return f"{self.title}: {self.message}"

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
            "global_rank": self.global_rank,
            "group": self.group,
            "group_rank": self.group_rank,
            "unknown_ranks": list(self.unknown_ranks),
            "owner": self.owner,
        }


@dataclass(frozen=True, slots=True)
class Incident:
    """A failure the run outlived: progress came after it, so it is not why the run died."""

    finding: Finding
    progress_after: int  # distinct progress lines (train steps, rollouts, evals) logged after it
    progress: str  # the first of them, as the log named it ("step 6")

    def to_json(self) -> dict[str, Any]:
        return {**self.finding.to_json(), "progress_after": self.progress_after, "progress": self.progress}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a run failed: its cause, what followed from it, and a doubt where Ray's verdict disagrees."""

    cause: Finding
    consequences: tuple[Finding, ...]
    doubt: str | None = None  # "Ray says the job succeeded, but …"
    incidents: tuple[Incident, ...] = ()  # failures before the cause that the run outlived
    up_s: float | None = None  # how long the run had logged when the cause's line came (its stamps)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.cause.to_json(),
            "consequences": [c.to_json() for c in self.consequences],
            "doubt": self.doubt,
            "incidents": [i.to_json() for i in self.incidents],
            "up_s": None if self.up_s is None else round(self.up_s, 1),
        }

    @property
    def headline(self) -> str:
        return self.cause.headline


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "" if key in _OPTIONAL else "?"


def render(
    event: FailureEvent,
    kind: FailureKind,
    *,
    world: int | None = None,
    ranks_seen: Sequence[int] = (),
    ranks_alive: Mapping[int, tuple[int, str | None]] | None = None,
) -> Finding:
    """The event in words: its kind's (or its pattern's) message with the event's fields filled in."""
    fields = _Fields(event.fields)
    node = event.fields.get("ip")
    fields["who"] = event.who
    # the process without its node, for a message that names the node itself (never "… on X … on node X")
    fields["process"] = event.who.replace(f" on {node}", "") if node else event.who
    fields["on"] = f" on {node}" if node else ""
    fields["role"] = event.role or "?"
    if event.error:
        fields["error"] = event.error
    fields["at_start"] = " at start (before the first rollout)" if event.at_start else ""
    ranks = event.collected.get("rank", [])
    unknown: tuple[int, ...] = ()
    if ranks:
        fields["ranks"] = _ranks_text(ranks)
        alive = _alive_after(event, ranks_alive or {})
        fields["others"], unknown = _others(ranks, world, ranks_seen, alive, folded=event.max_repeat - 1)
    elif event.collected.get("group_rank"):
        fields["ranks"] = "group rank(s) " + _ranks_text(event.collected["group_rank"])
        fields["others"] = (
            "; the log gives no global rank (torch printed no [rankN]: tag), so which ranks hung is unknown"
        )
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
        global_rank=_int(event.fields.get("rank")),
        group=event.fields.get("group"),
        group_rank=_int(event.fields.get("group_rank")),
        unknown_ranks=unknown,
        owner=_owner(event, kind),
    )


def _owner(event: FailureEvent, kind: FailureKind) -> str | None:
    """Ray's `Owner Id: … Owner Ip address: …` of an actor that died with its owner (never its default)."""
    said = {k: v for k, v in event.fields.items() if v != dict(kind.defaults).get(k)}
    if "owner_ip" not in said:
        return None
    return f"worker {said['owner_id']} on {said['owner_ip']}" if "owner_id" in said else said["owner_ip"]


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _alive_after(event: FailureEvent, ranks_alive: Mapping[int, tuple[int, str | None]]) -> set[int]:
    """Ranks with a line after the event's, also by the clock where both carry a c10 time (whole seconds:
    the digits below are monotonic nanoseconds)."""
    clock = _CLOCK.search(event.time or "")
    when = clock.group(0) if clock else None
    return {
        rank
        for rank, (seq, stamp) in ranks_alive.items()
        if seq > event.seq and (when is None or stamp is None or stamp >= when)
    }


def _ranks_text(ranks: Sequence[str]) -> str:
    ordered = sorted(ranks, key=lambda r: int(r) if r.isdigit() else 0)
    shown = ", ".join(ordered[:MAX_RANKS_SHOWN])
    return shown + (f" and {len(ordered) - MAX_RANKS_SHOWN} more" if len(ordered) > MAX_RANKS_SHOWN else "")


def _others(
    ranks: Sequence[str],
    world: int | None,
    ranks_seen: Sequence[int],
    alive: set[int],
    *,
    folded: int = 0,
) -> tuple[str, tuple[int, ...]]:
    """The ranks that did NOT time out are the suspects, but only a rank the log shows alive after the
    timeout is known not to have timed out; a rank whose line was cut, folded by Ray or is not in the log is
    unknown, and said so (never a healthy suspect invented)."""
    timed_out = {int(r) for r in ranks if r.isdigit()}
    quiet = sorted(alive - timed_out)
    everyone = set(range(world)) if world else set(ranks_seen)
    unknown = tuple(sorted(everyone - timed_out - set(quiet)))
    parts = [_quiet_part(quiet), _folded_part(folded), _unknown_part(unknown, bool(quiet or folded))]
    return "; " + "; ".join(p for p in parts if p), unknown


def _quiet_part(quiet: Sequence[int]) -> str:
    """The ranks alive after the timeout: the suspects."""
    if not quiet:
        return ""
    return (
        f"rank(s) {_ranks_text([str(r) for r in quiet])} did not time out (alive after it): look there first"
    )


def _folded_part(folded: int) -> str:
    if folded <= 0:
        return ""
    return f"Ray folded {folded} more watchdog line(s), so the log cannot say which ranks they were"


def _unknown_part(unknown: Sequence[int], said_other: bool) -> str:
    """The ranks the log cannot speak for; with nothing else said, that nothing is known."""
    if unknown:
        return (
            f"{len(unknown)} rank(s) unknown ({_ranks_text([str(r) for r in unknown])}): their lines are "
            "cut, folded or not in the log: dump the job's stacks"
        )
    if said_other:
        return ""
    return "which rank did not time out is not in the log: dump the job's stacks"


def _same_process(a: FailureEvent, b: FailureEvent) -> bool:
    if a.pid is not None and b.pid is not None:
        return a.pid == b.pid
    return a.who == b.who


def _order(pool: Sequence[FailureEvent]) -> list[FailureEvent]:
    if all(e.time is not None and _ISO.match(e.time) for e in pool):
        return sorted(pool, key=lambda e: (str(e.time).replace("T", " ").replace(",", "."), e.seq))
    return sorted(pool, key=lambda e: e.seq)


def _progress_after(
    event: FailureEvent, progress: Sequence[tuple[int, str]], *, in_flight: bool = False
) -> tuple[int, str]:
    """How many distinct progress lines came after the event that had not come before it (a replayed tail
    repeats old ones), and the first of them; for a death Ray reports, past the rollout in flight."""
    before = {label for seq, label in progress if seq < event.seq}
    # dict.fromkeys: distinct, in first-seen order
    after = list(dict.fromkeys(label for seq, label in progress if seq > event.seq and label not in before))
    if in_flight:
        after = _past_in_flight(after)
    strong = [a for a in after if not a.startswith("rollout")]
    if not strong and len(after) < 2:  # one rollout line may still be in flight from before the error
        return 0, ""
    return len(after), after[0]


def _past_in_flight(labels: list[str]) -> list[str]:
    """The progress after a death Ray reports, less the rollout that was in flight: the surviving ranks may
    still log its rollout line and its steps (they had not yet met the dead one, and Ray's notice reaches the
    driver by another path than their lines). From the next rollout (or eval) line on it is the run's own."""
    boundary = ("rollout", "eval")
    nxt = next((i for i, label in enumerate(labels) if i > 0 and label.startswith(boundary)), None)
    if nxt is not None:
        return labels[nxt:]
    if labels and labels[0].startswith(boundary):
        return []  # only the rollout in flight
    return labels[1:]  # a log with no rollout lines: its first step may be the one in flight


def _outlived(event: FailureEvent, kind: FailureKind, progress: Sequence[tuple[int, str]]) -> tuple[int, str]:
    """A failure the run outlived: progress after it. A NaN loss, or NaN grad norms twice, is divergence."""
    steps = event.collected.get("step", [])  # distinct steps: miles prints a step's dict twice
    times = len(steps) if steps else event.count
    if kind.cascade == "report" or (
        kind.id == "nan" and (times > 1 or event.fields.get("key") != "train/grad_norm")
    ):
        return 0, ""
    return _progress_after(event, progress, in_flight=kind.in_flight)


def diagnose(
    events: Sequence[FailureEvent],
    catalog: FailureCatalog | None = None,
    *,
    world: int | None = None,
    ranks_seen: Sequence[int] = (),
    ranks_alive: Mapping[int, tuple[int, str | None]] | None = None,
    progress: Sequence[tuple[int, str]] = (),
    succeeded: bool = False,
) -> Diagnosis | None:
    """The cause and its consequences, or None when the log holds no failure the run did not outlive."""
    catalog = catalog or default_catalog()
    kinds = {k.id: k for k in catalog.kinds}

    def word(e: FailureEvent) -> Finding:
        return render(e, kinds[e.kind], world=world, ranks_seen=ranks_seen, ranks_alive=ranks_alive)

    outlived, events = _split_outlived(events, kinds, progress)
    if succeeded:  # an actor the program killed itself, in a job that ended well, is no failure
        events = [e for e in events if not catalog.is_intended(e)]
    if not events:
        return None
    incidents = [Incident(word(e), n, first) for e, n, first in outlived]
    cause = _cause(events, kinds, catalog)
    rest = [e for e in sorted(events, key=lambda e: e.seq) if e is not cause]
    before = tuple(i for i in incidents if i.finding.seq < cause.seq)
    return Diagnosis(word(cause), tuple(word(e) for e in rest), _doubt(kinds[cause.kind], succeeded), before)


def _split_outlived(
    events: Sequence[FailureEvent], kinds: Mapping[str, FailureKind], progress: Sequence[tuple[int, str]]
) -> tuple[list[tuple[FailureEvent, int, str]], list[FailureEvent]]:
    """The events the run outlived (each with its progress after it), and the rest, each in input order."""
    outlived: list[tuple[FailureEvent, int, str]] = []
    rest: list[FailureEvent] = []
    for e in events:
        n, first = _outlived(e, kinds[e.kind], progress)
        if n > 0:
            outlived.append((e, n, first))
        else:
            rest.append(e)
    return outlived, rest


def _yields(event: FailureEvent, events: Sequence[FailureEvent], kind: FailureKind) -> bool:
    """Another event this one is the precursor of (`yields_to` for the same process, or `yields_to_any`)."""
    return any(
        o is not event
        and ((o.kind in kind.yields_to and _same_process(event, o)) or o.kind in kind.yields_to_any)
        for o in events
    )


def _later(event: FailureEvent) -> bool:
    """The log itself says another failure came first: an entry of torch elastic's `Failures:` section (its
    earliest, by timestamp, is the table's root entry)."""
    return event.fields.get("elastic") == "other"


def _cause(
    events: Sequence[FailureEvent], kinds: Mapping[str, FailureKind], catalog: FailureCatalog
) -> FailureEvent:
    """The earliest of the highest tier present: an independent root, else a symptom, else a report (an
    actor the program killed itself, a caller relaying its callee's death: how it ended, never why)."""
    meant = [e for e in events if catalog.only_says_how(e)]
    events = [e for e in events if e not in meant]
    tiers = (
        [
            e
            for e in events
            if kinds[e.kind].cascade == "root" and not _yields(e, events, kinds[e.kind]) and not _later(e)
        ],
        [e for e in events if kinds[e.kind].cascade == "symptom"],
        [e for e in events if kinds[e.kind].cascade == "report"] + meant,
    )
    pool = next((tier for tier in tiers if tier), events)
    return _order(pool)[0]


def _doubt(kind: FailureKind, succeeded: bool) -> str | None:
    """Ray's success against a failure in the log: worth a second look, said so."""
    if not succeeded:
        return None
    return (
        f"Ray says the job succeeded, but the log says {kind.title.lower()}: "
        "check that the run did what it should"
    )


def incidents(
    events: Sequence[FailureEvent],
    catalog: FailureCatalog | None = None,
    *,
    progress: Sequence[tuple[int, str]] = (),
) -> tuple[Incident, ...]:
    """Every failure the run outlived (an alert, never the cause), in log order."""
    catalog = catalog or default_catalog()
    kinds = {k.id: k for k in catalog.kinds}
    out = []
    for e in sorted(events, key=lambda e: e.seq):
        n, first = _outlived(e, kinds[e.kind], progress)
        if n > 0:
            out.append(Incident(render(e, kinds[e.kind]), n, first))
    return tuple(out)
