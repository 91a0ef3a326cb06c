"""PyTorch Flight Recorder dumps, one per rank: which rank broke the collective the others wait in.

Why our own: torch's `fr_trace` crashes on gloo dumps (their `pg_config` is empty) and, on an op or size
mismatch, blames whoever differs from the first file it lists. Here each group's ranks are rebuilt (from
`pg_config`, else from the ranks whose entries name the group), entries are aligned by (group, collective
sequence id), and the first sequence where the ranks disagree is judged by majority: who never entered
it, who entered another op or other sizes, who left no dump at all. Pure over the dump format; reading a
file goes through backend.safe_unpickle (a dump is a pickle) or json.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.safe_unpickle import load_path

MAX_JSON_BYTES = 256 << 20
STACK_FRAMES = 4
_LIBRARY_PATH = re.compile(r"/torch/|/site-packages/torch/|c10d_logger|/ray/_private/|/ray/util/tracing/")
_TRAILING_RANK = re.compile(r"(\d+)(?:\.\w+)*$")


@dataclass(frozen=True)
class Entry:
    """One collective as one rank recorded it."""

    group: str
    group_desc: str
    seq: int
    op: str
    sizes: str
    frames: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankDump:
    """One rank's dump: its collectives and the group membership its pg_config states (often none)."""

    rank: int
    entries: tuple[Entry, ...]
    group_ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Culprit:
    """A rank that broke the sequence: `kind` is missing, op, sizes or dead."""

    rank: int
    kind: str
    op: str = ""
    sizes: str = ""
    stack: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The first (group, sequence) the ranks disagree on, what the majority did there, and who did not."""

    group: str
    group_desc: str
    ranks: tuple[int, ...]
    seq: int
    op: str
    sizes: str
    culprits: tuple[Culprit, ...]
    majority: bool = True

    def line(self, labels: Mapping[int, str] | None = None) -> str:
        """One sentence naming every culprit, e.g. `rank 97 (node 12, pid 4411) never entered all_reduce
        #1580 of the group 3 (tp) {96..103}; its stack: ...`."""
        where = f"{self.op} #{self.seq} of group {self.group}"
        where += f" ({self.group_desc})" if self.group_desc and self.group_desc != "undefined" else ""
        where += f" {rank_set(self.ranks)}"
        parts = []
        for c in self.culprits:
            who = f"rank {c.rank}" + (f" ({labels[c.rank]})" if labels and c.rank in labels else "")
            did = {
                "missing": f"never entered {where}",
                "dead": f"left no dump (dead?) while the others wait in {where}",
                "op": f"entered {c.op} instead of {where}",
                "sizes": f"entered {where} with sizes {c.sizes} (the others {self.sizes})",
            }[c.kind]
            stack = f"; its stack: {' ← '.join(c.stack)}" if c.stack else ""
            parts.append(who + " " + did + stack)
        tie = "" if self.majority else " (no majority: half the ranks each way)"
        return "; ".join(parts) + tie


@dataclass(frozen=True)
class Analysis:
    """Every dump read, the ranks that left none, the verdict (None: the ranks agree)."""

    ranks: tuple[int, ...]
    dead: tuple[int, ...]
    verdict: Verdict | None
    unreadable: tuple[tuple[str, str], ...] = ()

    def to_json(self, labels: Mapping[int, str] | None = None) -> dict[str, object]:
        v = self.verdict
        return {
            "ranks": list(self.ranks),
            "dead": list(self.dead),
            "unreadable": [{"file": f, "why": w} for f, w in self.unreadable],
            "verdict": None
            if v is None
            else {
                "line": v.line(labels),
                "group": v.group,
                "group_desc": v.group_desc,
                "group_ranks": list(v.ranks),
                "seq": v.seq,
                "op": v.op,
                "sizes": v.sizes,
                "majority": v.majority,
                "culprits": [
                    {"rank": c.rank, "kind": c.kind, "op": c.op, "sizes": c.sizes, "stack": list(c.stack)}
                    for c in v.culprits
                ],
            },
        }


def rank_set(ranks: Sequence[int]) -> str:
    """{96..103} for a contiguous range, else {0,2,5}."""
    r = sorted(ranks)
    if len(r) > 2 and r == list(range(r[0], r[-1] + 1)):
        return f"{{{r[0]}..{r[-1]}}}"
    return "{" + ",".join(str(x) for x in r) + "}"


def _frames(raw: Fields) -> tuple[str, ...]:
    """The caller's frames (torch's own left out), innermost first, as `name (file:line)`."""
    out = []
    for f in raw.objs("frames"):
        path = f.text("filename")
        if _LIBRARY_PATH.search(path):
            continue
        out.append(f"{f.text('name', '?')} ({Path(path).name}:{f.integer('line')})")
    return tuple(out[:STACK_FRAMES])


def _entry(raw: Fields) -> Entry | None:
    if raw.has("is_p2p") and raw.raw.get("is_p2p") is True:
        return None
    seq = raw.integer("collective_seq_id")
    pg = raw.raw.get("process_group")
    if not seq or not isinstance(pg, (list, tuple)) or not pg:
        return None
    op = raw.text("profiling_name").split(":")[-1] or "?"
    sizes = json.dumps(raw.raw.get("input_sizes"), separators=(",", ":"))
    desc = str(pg[1]) if len(pg) > 1 else ""
    return Entry(str(pg[0]), desc, seq, op, sizes, _frames(raw))


def _group_ranks(pg_config: Fields) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for name, cfg in pg_config.raw.items():
        if not isinstance(cfg, dict):
            continue
        ranks = cfg.get("ranks")
        try:
            parsed = json.loads(ranks) if isinstance(ranks, str) else ranks
        except (ValueError, RecursionError):
            continue
        if isinstance(parsed, list) and parsed and all(isinstance(x, int) for x in parsed):
            out[str(name)] = tuple(parsed)
    return out


def parse_dump(data: object, rank: int, source: str = "") -> RankDump:
    """One rank's dump (pickle or JSON already decoded) as entries; raises ConsoleError when it is none."""
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ConsoleError(f"{source or 'dump'}: not a flight-recorder dump (no entries list)")
    top = Fields(data)
    entries = tuple(e for e in (_entry(f) for f in top.objs("entries")) if e is not None)
    return RankDump(rank, entries, _group_ranks(top.obj("pg_config")), source)


def rank_of_file(path: Path) -> int | None:
    """The rank a file's name ends with (`rank3`, `nccl_trace_rank_12`, `trace_7.json`)."""
    found = _TRAILING_RANK.search(path.name)
    return int(found.group(1)) if found else None


def read_dump(path: Path) -> RankDump:
    """A dump file: JSON when it starts with `{`, else a pickle read by the restricted unpickler."""
    rank = rank_of_file(path)
    if rank is None:
        raise ConsoleError(f"{path.name}: no rank at the end of its name")
    with path.open("rb") as f:
        head = f.read(1)
    if head == b"{":
        if path.stat().st_size > MAX_JSON_BYTES:
            raise ConsoleError(f"{path.name}: larger than {MAX_JSON_BYTES >> 20} MB")
        try:
            data: object = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ConsoleError(f"{path.name}: broken JSON ({err})") from None
        except RecursionError:  # a dump nested past the stack: one line, like a broken one
            raise ConsoleError(f"{path.name}: JSON nested too deeply to read") from None
    else:
        data = load_path(path)
    return parse_dump(data, rank, path.name)


def read_dir(folder: Path) -> tuple[list[RankDump], list[tuple[str, str]]]:
    """Every dump in `folder` (one per rank), and the files that could not be read, with why."""
    dumps, bad = [], []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.endswith((".py", ".pipe"))):
        try:
            dumps.append(read_dump(path))
        except ConsoleError as err:
            bad.append((path.name, str(err)))
    return dumps, bad


# --------------------------------------------------------------------------- the analysis


def _members(dumps: Sequence[RankDump], world: Iterable[int]) -> dict[str, tuple[int, ...]]:
    """Each group's ranks: what a pg_config says, else the ranks with entries in it; the default group
    (desc default_pg, or name 0) holds the whole world, dead ranks included."""
    groups: dict[str, set[int]] = {}
    for d in dumps:
        for e in d.entries:
            groups.setdefault(e.group, set()).add(d.rank)
            if e.group_desc == "default_pg" or e.group == "0":
                groups[e.group].update(world)
    for d in dumps:
        for name, ranks in d.group_ranks.items():
            if name in groups:
                groups[name] = set(ranks)
    return {g: tuple(sorted(r)) for g, r in groups.items()}


def _missing(
    members: tuple[int, ...],
    seq: int,
    by_rank: Mapping[int, Mapping[int, Entry]],
    present: Mapping[int, Entry],
) -> list[int]:
    """Ranks with no entry `seq`: a rank whose ring buffer starts after `seq` cannot say, so only ranks
    whose window covers it are judged."""
    return [r for r in members if r in by_rank and r not in present and min(by_rank[r], default=0) <= seq]


def _outvoted(present: Mapping[int, Entry], op: str, sizes: str) -> list[Culprit]:
    """The ranks whose entry differs from the majority's op and sizes."""
    return [
        Culprit(r, "op" if e.op != op else "sizes", e.op, e.sizes, e.frames)
        for r, e in sorted(present.items())
        if (e.op, e.sizes) != (op, sizes)
    ]


def _judge(
    group: str, members: tuple[int, ...], seq: int, by_rank: Mapping[int, Mapping[int, Entry]], last: Mapping
) -> Verdict | None:
    present = {r: by_rank[r][seq] for r in members if r in by_rank and seq in by_rank[r]}
    if not present:
        return None
    votes = Counter((e.op, e.sizes) for e in present.values())
    (op, sizes), top = votes.most_common(1)[0]
    tie = sum(1 for n in votes.values() if n == top) > 1
    culprits = [
        Culprit(r, "missing", stack=last.get(r, ())) for r in _missing(members, seq, by_rank, present)
    ]
    culprits += _outvoted(present, op, sizes)
    if not culprits:
        return None
    desc = next(iter(present.values())).group_desc
    return Verdict(group, desc, members, seq, op, sizes, tuple(culprits), majority=not tie)


def _last_frames(dumps: Sequence[RankDump]) -> dict[int, tuple[str, ...]]:
    return {d.rank: d.entries[-1].frames for d in dumps if d.entries}


def _by_group(dumps: Sequence[RankDump]) -> dict[str, dict[int, dict[int, Entry]]]:
    """Every entry by process group, then rank, then sequence number."""
    by_group: dict[str, dict[int, dict[int, Entry]]] = {}
    for d in dumps:
        for e in d.entries:
            by_group.setdefault(e.group, {}).setdefault(d.rank, {})[e.seq] = e
    return by_group


def _earliest(
    by_group: Mapping[str, Mapping[int, Mapping[int, Entry]]],
    members: Mapping[str, tuple[int, ...]],
    stacks: Mapping[int, tuple[str, ...]],
) -> Verdict | None:
    """The first disagreement over every group: the lowest sequence number wins."""
    found = [
        v
        for g, by_rank in by_group.items()
        for v in [_first_disagreement(g, members[g], by_rank, stacks)]
        if v is not None
    ]
    return min(found, key=lambda v: (v.seq, v.group)) if found else None


def analyse(
    dumps: Sequence[RankDump],
    *,
    world_size: int | None = None,
    live_stacks: Mapping[int, tuple[str, ...]] | None = None,
    unreadable: Sequence[tuple[str, str]] = (),
) -> Analysis:
    """The verdict over every rank's dump. `world_size` (else the highest rank + 1) says which ranks
    should have left one; `live_stacks` (a rank's traceback taken while it hung) wins over its last
    entry's frames."""
    ranks = sorted({d.rank for d in dumps})
    size = world_size or (ranks[-1] + 1 if ranks else 0)
    dead = tuple(r for r in range(size) if r not in ranks)
    stacks = {**_last_frames(dumps), **(live_stacks or {})}
    members = _members(dumps, range(size))
    by_group = _by_group(dumps)
    verdict = _earliest(by_group, members, stacks)
    if verdict is None and dead:
        verdict = _dead_verdict(by_group, members, dead)
    return Analysis(tuple(ranks), dead, verdict, tuple(unreadable))


def _first_disagreement(
    group: str, members: tuple[int, ...], by_rank: Mapping[int, Mapping[int, Entry]], stacks: Mapping
) -> Verdict | None:
    seqs = sorted({s for entries in by_rank.values() for s in entries})
    for seq in seqs:
        verdict = _judge(group, members, seq, by_rank, stacks)
        if verdict is not None:
            return verdict
    return None


def _dead_verdict(
    by_group: Mapping[str, Mapping[int, Mapping[int, Entry]]],
    members: Mapping[str, tuple[int, ...]],
    dead: tuple[int, ...],
) -> Verdict | None:
    """The ranks agree but some left no dump: the group with a dead member whose latest sequence the living
    all entered is where they wait."""
    best: Verdict | None = None
    for g, by_rank in by_group.items():
        gone = [r for r in dead if r in members[g]]
        if not gone or not by_rank:
            continue
        seq = min(max(entries) for entries in by_rank.values())
        e = next(iter(by_rank.values()))[seq]
        v = Verdict(g, e.group_desc, members[g], seq, e.op, e.sizes, tuple(Culprit(r, "dead") for r in gone))
        if best is None or len(v.ranks) < len(best.ranks):
            best = v
    return best


def analyse_dir(folder: Path | str, *, world_size: int | None = None) -> Analysis:
    """`analyse` over a folder of gathered dumps (one file per rank)."""
    dumps, bad = read_dir(Path(folder))
    return analyse(dumps, world_size=world_size, unreadable=bad)


def collective_cause(folder: Path | str, labels: Mapping[int, str] | None = None) -> str | None:
    """For the failure diagnosis of an NCCL timeout: the verdict line when dumps exist and disagree."""
    path = Path(folder)
    if not path.is_dir():
        return None
    verdict = analyse_dir(path).verdict
    return verdict.line(labels) if verdict else None


_TB_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+")
_TB_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<name>\S+)')


def _threads(text: str) -> list[list[tuple[str, str, int]]]:
    """Each thread's (function, file, line) frames in faulthandler's order; frameless threads left out."""
    threads: list[list[tuple[str, str, int]]] = []
    for line in text.splitlines():
        if _TB_THREAD.match(line):
            threads.append([])
        elif (m := _TB_FRAME.match(line)) and threads:
            threads[-1].append((m["name"], m["file"], int(m["line"])))
    return [t for t in threads if t]


def traceback_frames(text: str) -> tuple[str, ...]:
    """A live rank's stack from its traceback (faulthandler's text, as torch's `dump_traceback` handler
    answers), innermost first, torch's own frames left out: the thread waiting in a collective, else the
    main thread (faulthandler lists it last)."""
    threads = _threads(text)
    if not threads:
        return ()
    waiting = [t for t in threads if any(f.endswith("distributed_c10d.py") for _, f, _ in t)]
    chosen = waiting[0] if waiting else threads[-1]
    out = [f"{n} ({Path(f).name}:{ln})" for n, f, ln in chosen if not _LIBRARY_PATH.search(f)]
    return tuple(out[:STACK_FRAMES])
