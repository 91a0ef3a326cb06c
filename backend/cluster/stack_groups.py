"""Every rank's Python stack, normalised and grouped: the odd one out of a hung run, first.

Why group: on a 128-GPU run that hangs, 127 ranks wait in the same collective and one is somewhere else;
128 dumps are unreadable, "127: allreduce ← … ← train_step; 1 (node 12, rank 97, pid 4411): recv ← …"
is the answer. Two processes are in the same group when their threads hold the same frames, compared
without what differs between identical stacks (thread ids, addresses, line numbers within one function,
the digits of a pool thread's name). Groups are listed smallest first. Every text field came from a
process on a node: it is sanitised here, once, before anything shows or saves it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backend.json_fields import Fields
from backend.natural_order import natural_key
from backend.sanitize import one_line

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_DIGITS = re.compile(r"\d+")
_RAY_TITLE = re.compile(r"^ray::(?P<actor>[A-Za-z_][\w]*)(?:\.(?P<task>[\w<>]+))?")
# threads of every Ray worker that say nothing about the run, and the frame a worker idles in between tasks
BACKGROUND_THREADS = frozenset({"PythonGCThread", "ray_print_logs", "ray_listen_error_messages"})
IDLE_FRAMES = frozenset({"Worker.main_loop", "main_loop"})
FRAMEWORK_FILES = ("ray/", "threading.py", "concurrent/", "asyncio/", "selectors.py")
SHOWN_FRAMES = 3  # innermost frames a group's one-line headline shows before "…" and the task's own frame


def clean(text: object, limit: int = 300) -> str:
    """A field from a node, fit for a line: sanitised, one line, bounded."""
    out = one_line(str(text))
    return out if len(out) <= limit else out[:limit] + "…"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    @property
    def key(self) -> tuple[str, str]:
        """What identifies the frame across processes: no line number, no address."""
        return _ADDRESS.sub("0x…", self.function), self.file

    def text(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class ThreadStack:
    name: str
    tid: int
    active: bool
    frames: tuple[Frame, ...]  # innermost first, as py-spy gives them
    cut: int = 0  # frames py-spy gave beyond what the node kept

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return _DIGITS.sub("N", self.name), tuple(f.key for f in self.frames)

    @property
    def telling(self) -> bool:
        """Whether this thread says what the process is doing (not a Ray helper thread, not the idle loop)."""
        if not self.frames or self.name in BACKGROUND_THREADS:
            return False
        return self.frames[0].function not in IDLE_FRAMES


@dataclass(frozen=True)
class ProcessStack:
    """One process of the job, on one node, as py-spy read it."""

    node_id: str
    node_label: str
    pid: int
    command: str
    threads: tuple[ThreadStack, ...]
    rank: int | None = None

    @property
    def actor(self) -> str:
        """The Ray actor class from the process title
        (`ray::MegatronTrainRayActor.train`), else the command."""
        m = _RAY_TITLE.match(self.command)
        if m:
            return m["actor"]
        return self.command.split(" ", 1)[0].rsplit("/", 1)[-1] or "process"

    @property
    def key(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        return tuple(sorted(t.key for t in self.threads if t.frames))

    @property
    def main(self) -> ThreadStack | None:
        """The thread that tells what the process is doing: the main thread if it works, else the deepest
        telling thread (an actor with concurrency groups runs its tasks off the main thread)."""
        telling = [t for t in self.threads if t.telling]
        if not telling:
            return next((t for t in self.threads if t.frames), None)
        main = next((t for t in telling if t.name == "MainThread"), None)
        return main or max(telling, key=lambda t: len(t.frames))

    def who(self) -> str:
        rank = f", rank {self.rank}" if self.rank is not None else ""
        return f"node {self.node_label}{rank}, {self.actor} pid {self.pid}"

    def text(self) -> str:
        """The whole dump of this process, every thread, innermost frame first."""
        lines = [f"{self.who()}: {self.command}"]
        for t in self.threads:
            lines.append(f"  thread {t.name or '?'} (tid {t.tid}{', active' if t.active else ''})")
            lines += [f"    {f.text()}" for f in t.frames]
            if t.cut:
                lines.append(f"    … {t.cut} outer frame(s) not kept")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "node": self.node_label,
            "pid": self.pid,
            "rank": self.rank,
            "actor": self.actor,
            "command": self.command,
            "threads": [
                {
                    "name": t.name,
                    "tid": t.tid,
                    "active": t.active,
                    "frames": [[f.function, f.file, f.line] for f in t.frames],
                }
                for t in self.threads
            ],
        }


def _own_functions(thread: ThreadStack) -> list[str]:
    """The thread's functions outside the frameworks (and not a module's top level), innermost first."""
    return [
        f.function
        for f in thread.frames
        if not f.file.startswith(FRAMEWORK_FILES) and f.function != "<module>"
    ]


def headline(thread: ThreadStack | None) -> str:
    """`innermost ← next ← … ← the task's own outermost frame`, in one line."""
    if thread is None or not thread.frames:
        return "no Python frame"
    names = [f.function for f in thread.frames]
    own = _own_functions(thread)
    shown = names[:SHOWN_FRAMES]
    if own and own[-1] not in shown:
        shown += ["…", own[-1]] if names.index(own[-1]) > SHOWN_FRAMES else [own[-1]]
    elif not own and len(names) > SHOWN_FRAMES:
        shown.append("…")
    return " ← ".join(shown)


@dataclass(frozen=True)
class StackGroup:
    """Processes whose stacks are the same once normalised."""

    processes: tuple[ProcessStack, ...]

    @property
    def size(self) -> int:
        return len(self.processes)

    @property
    def headline(self) -> str:
        return headline(self.processes[0].main)

    def line(self, members_shown: int = 3) -> str:
        """`7 ranks: allreduce ← … ← train_step`, naming the members of a small group."""
        first = self.processes[0]
        count = f"{self.size} process{'es' if self.size != 1 else ''}"
        if first.rank is not None and all(p.rank is not None for p in self.processes):
            count = f"{self.size} rank{'s' if self.size != 1 else ''}"
        if self.size <= members_shown:
            count += " (" + "; ".join(p.who() for p in self.processes) + ")"
        return f"{count}: {self.headline}"


@dataclass(frozen=True)
class Unreadable:
    """A process of the job whose stack py-spy could not read, and why (kind: ptrace, not_python, gone,
    timeout, error)."""

    node_id: str
    node_label: str
    pid: int
    command: str
    kind: str
    reason: str

    def line(self) -> str:
        return f"pid {self.pid} on node {self.node_label} ({self.command[:60] or '?'}): {self.reason}"


@dataclass(frozen=True)
class NodeFailure:
    """A node where no stack could be read: it did not answer, or py-spy cannot run there."""

    node_id: str
    node_label: str
    reason: str

    def line(self) -> str:
        return f"node {self.node_label}: {self.reason}"


def group(processes: Iterable[ProcessStack]) -> list[StackGroup]:
    """Identical stacks together; the smallest groups first (the odd one out is usually the culprit), then by
    node and pid."""
    by_key: dict[tuple[tuple[str, tuple[tuple[str, str], ...]], ...], list[ProcessStack]] = {}
    for proc in processes:
        by_key.setdefault(proc.key, []).append(proc)
    groups = [
        StackGroup(tuple(sorted(ps, key=lambda p: (natural_key(p.node_label), p.pid))))
        for ps in by_key.values()
    ]
    return sorted(groups, key=lambda g: (g.size, natural_key(g.processes[0].node_label), g.processes[0].pid))


def parse_process(
    node_id: str, node_label: str, raw: Mapping[str, object], ranks: Mapping[int, int]
) -> ProcessStack | Unreadable:
    """One result line of the node's dumper, sanitised."""
    item = Fields(raw)
    pid, node_label = item.integer("pid"), clean(node_label, 80)
    command = clean(item.text("cmd"), 400)
    if "threads" not in raw:
        return Unreadable(
            node_id,
            node_label,
            pid,
            command,
            clean(item.text("kind", "error"), 20),
            clean(item.text("error", "py-spy gave no reason")),
        )
    threads = [
        ThreadStack(
            clean(thread.text("name"), 80),
            thread.integer("tid"),
            thread.has("active"),
            tuple(
                Frame(clean(f.text("name", "?"), 200), clean(f.text("file"), 200), f.integer("line"))
                for f in thread.objs("frames")
            ),
            thread.integer("cut"),
        )
        for thread in item.objs("threads")
    ]
    return ProcessStack(node_id, node_label, pid, command, tuple(threads), ranks.get(pid))


def _not_python_line(other: list[Unreadable]) -> list[str]:
    """One line naming the job's processes that have no Python stack (by program name)."""
    if not other:
        return []
    names = sorted({u.command.split(" ", 1)[0].rsplit("/", 1)[-1] or "?" for u in other})
    return [f"not Python (no Python stack): {len(other)} process(es) of the job: {', '.join(names[:6])}"]


@dataclass(frozen=True)
class StacksReport:
    """Every readable stack of the job's processes, what could not be read, and where nothing answered."""

    job: str
    taken_at: float
    processes: tuple[ProcessStack, ...]
    unreadable: tuple[Unreadable, ...] = ()
    failed_nodes: tuple[NodeFailure, ...] = ()
    nodes_asked: int = 0
    seconds: float = 0.0
    saved_to: str = ""
    groups: tuple[StackGroup, ...] = field(default=())
    notes: tuple[str, ...] = ()  # what may be missing, and why

    @classmethod
    def build(
        cls, job: str, taken_at: float, processes: Iterable[ProcessStack], **kwargs: Any
    ) -> StacksReport:
        procs = tuple(processes)
        return cls(job, taken_at, procs, groups=tuple(group(procs)), **kwargs)

    def summary(self) -> str:
        answered = self.nodes_asked - len(self.failed_nodes)
        out = (
            f"{len(self.processes)} stack(s) in {len(self.groups)} group(s) from {answered} of "
            f"{self.nodes_asked} node(s) in {self.seconds:.1f} s"
        )
        if self.unreadable:
            out += f"; {len(self.unreadable)} process(es) unreadable"
        return out

    def lines(self) -> list[str]:
        """The report in lines: the groups, small first, then
        what could not be read and which nodes failed."""
        out = [g.line() for g in self.groups]
        out += [f"unreadable: {u.line()}" for u in self.unreadable if u.kind != "not_python"]
        out += _not_python_line([u for u in self.unreadable if u.kind == "not_python"])
        out += [f"failed: {n.line()}" for n in self.failed_nodes]
        out += [f"note: {n}" for n in self.notes]
        return out

    def full_text(self) -> str:
        """Everything, for the saved file: the summary, the groups, then every stack in full."""
        parts = [
            f"stacks of job {self.job} taken at {self.taken_at:.0f}: {self.summary()}",
            *self.lines(),
            "",
        ]
        for i, g in enumerate(self.groups, 1):
            parts.append(f"=== group {i} of {len(self.groups)}: {g.line(members_shown=0)}")
            parts += [p.text() for p in g.processes]
            parts.append("")
        return "\n".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "taken_at": self.taken_at,
            "seconds": self.seconds,
            "saved_to": self.saved_to,
            "nodes_asked": self.nodes_asked,
            "groups": [
                {
                    "size": g.size,
                    "headline": g.headline,
                    "members": [
                        {
                            "node_id": p.node_id,
                            "node": p.node_label,
                            "pid": p.pid,
                            "rank": p.rank,
                            "actor": p.actor,
                        }
                        for p in g.processes
                    ],
                    "stack": g.processes[0].to_json()["threads"],
                }
                for g in self.groups
            ],
            "unreadable": [vars(u) for u in self.unreadable],
            "failed_nodes": [vars(n) for n in self.failed_nodes],
            "notes": list(self.notes),
        }
