"""Leftovers: GPU processes a run left behind, read on each
node after the run ended, and killed only if the job's.

Why not from the dashboard: Ray's node summary is the reporter's reading of up to 5 s ago, cached 2 s more;
right after a stop it still lists PIDs that died with the job (ray.md §8.1: 12.5 s old, marked fresh).
So once the job is terminal the node-pinned reaper job (backend/cluster/reaper_job.py) runs in list mode
on every node the job ran on and reads NVML there and then, with each holder's identity checked on that
node. A node that does not answer within the policy's bound is named, never assumed clean. Killing goes
through the same job: it re-reads NVML and re-checks identity before any signal.

Which nodes ran the job: its driver's node and every node Ray listed a worker of the job on while it ran
(its footprint, recorded at abort time into the audit log so a later `cleanup` finds it too); a job
without a recorded footprint is checked on every alive node.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.node_job import run_node_job
from backend.errors import ConsoleError
from backend.json_fields import Fields, as_int
from backend.sanitize import sanitize_text

if TYPE_CHECKING:
    from backend.cluster.audit import AuditEntry

REAP_MARK = "ULTRA_CONSOLE_REAP "
Identity = Literal["job", "unidentified", "exempt"]
ReapAction = Literal["killed", "skipped", "failed", "error"]


@dataclass(frozen=True)
class JobFootprint:
    """Where a job ran and how its processes are recognised on a node, recorded while it ran."""

    submission_id: str
    job_id: str = ""  # Ray's hex job id ("" until the driver connected)
    driver_node_id: str | None = None
    workers: tuple[
        tuple[str, int], ...
    ] = ()  # (node id, pid) of the driver and each actor Ray listed for the job
    listed: bool = False  # Ray answered the list of the job's actors (so `workers` is all of them)

    @property
    def complete(self) -> bool:
        """Whether `node_ids` are all the nodes the job ran on: Ray listed its actors, or it had none (a
        driver that never connected to Ray starts no actor)."""
        return self.listed or not self.job_id

    @property
    def node_ids(self) -> tuple[str, ...]:
        found = [self.driver_node_id] if self.driver_node_id else []
        found += [node for node, _ in self.workers]
        return tuple(dict.fromkeys(found))

    def worker_pids(self, node_id: str) -> tuple[int, ...]:
        return tuple(pid for node, pid in self.workers if node == node_id)

    def identity_args(self, node_id: str) -> list[str]:
        """The reaper's arguments that say whose processes to recognise on `node_id`."""
        args = ["--submission-id", self.submission_id, "--job-id", self.job_id]
        for pid in self.worker_pids(node_id):
            args += ["--worker-pid", str(pid)]
        return args

    def to_json(self) -> dict[str, object]:
        return {
            "submission_id": self.submission_id,
            "job_id": self.job_id,
            "driver_node_id": self.driver_node_id,
            "workers": [list(w) for w in self.workers],
            "listed": self.listed,
        }

    @classmethod
    def from_json(cls, data: Fields) -> JobFootprint:
        """The footprint `to_json` wrote (raises TypeError or ValueError on a worker that is not a pair)."""
        workers = [w for w in data.items("workers") if isinstance(w, (list, tuple))]
        if len(workers) != len(data.items("workers")):
            raise TypeError("a worker is not a (node, pid) pair")
        return cls(
            data.text("submission_id"),
            data.text("job_id"),
            data.optional_text("driver_node_id"),
            tuple((str(n), int(p)) for n, p in workers),
            data.has("listed"),
        )

    @classmethod
    def of(
        cls, job: JobInfo, workers: Iterable[tuple[str, int]] = (), *, listed: bool = False
    ) -> JobFootprint:
        return cls(job.submission_id or job.id, job.job_id or "", job.driver_node_id, tuple(workers), listed)


@dataclass(frozen=True)
class ActorRow:
    """One actor of a job as Ray's state API lists it."""

    node_id: str
    pid: int
    ip: str
    class_name: str


async def job_actors(client: RayClient, job: JobInfo) -> list[ActorRow] | None:
    """Every actor Ray lists for `job` (state API, dead ones too), or None when Ray cannot say."""
    if not job.job_id:
        return None
    try:
        data = await client.get_json(
            "/api/v0/actors",
            {
                "detail": 1,
                "limit": 10000,
                "filter_keys": "job_id",
                "filter_predicates": "=",
                "filter_values": job.job_id,
            },
            what=f"the actors of job {job.id}",
        )
    except ConsoleError:
        return None
    rows = Fields.of(data).obj("data").obj("result").objs("result")
    return [
        ActorRow(
            a.text("node_id"),
            a.integer("pid"),
            a.obj("address").text("ip_address"),
            a.text("class_name", "actor"),
        )
        for a in rows
        if a.has("node_id") and a.has("pid")
    ]


async def _job_processes(client: RayClient, job: JobInfo) -> tuple[list[tuple[str, int, str]], bool]:
    """(node id, pid, role) of the job's driver and of every actor Ray lists for it (state API), and whether
    Ray answered the actor list."""
    found: list[tuple[str, int, str]] = []
    driver = Fields.of((job.model_extra or {}).get("driver_info")).text("pid")
    if job.driver_node_id and driver.isdigit():
        found.append((job.driver_node_id, int(driver), "driver"))
    actors = await job_actors(client, job)
    found += [(a.node_id, a.pid, a.class_name) for a in actors or ()]
    return found, actors is not None


async def record_footprint(client: RayClient, job: JobInfo) -> JobFootprint:
    """The job's footprint now: its driver and every actor Ray lists for it (state API), with their nodes and
    PIDs; only the driver's node when Ray cannot say."""
    found, listed = await _job_processes(client, job)
    return JobFootprint.of(job, [(node, pid) for node, pid, _ in found], listed=listed)


async def job_roles(client: RayClient, job: JobInfo) -> dict[str, str]:
    """ "<node id>:<pid>" -> role (the driver, or its actor's class) of the job's processes Ray lists now: how
    the GPU pane names the PIDs holding GPUs."""
    found, _ = await _job_processes(client, job)
    return {f"{node}:{pid}": sanitize_text(role)[:40] for node, pid, role in found}


@dataclass(frozen=True)
class Leftover:
    """A process holding GPU memory on a node, read there after the run ended."""

    node_id: str
    node_label: str
    gpu_index: int
    pid: int
    mem_mb: int
    identity: Identity = "job"
    reason: str = ""
    name: str = ""

    def text(self) -> str:
        who = f"pid {self.pid}" + (f" ({self.name})" if self.name else "")
        return f"{who} on {self.node_label} GPU {self.gpu_index}, {self.mem_mb} MiB"


@dataclass(frozen=True)
class NodeCheck:
    """One node's answer (or its silence): `unlisted` are
    GPUs with memory in use but no process NVML names."""

    node_id: str
    node_label: str
    answered: bool
    problem: str = ""
    nvml: bool = True
    unlisted: tuple[tuple[int, int], ...] = ()
    read_at: float | None = None


@dataclass(frozen=True)
class LeftoverReport:
    """What the on-node readings found after a run ended, node by node."""

    job: str | None
    nodes: tuple[NodeCheck, ...]
    items: tuple[Leftover, ...] = ()
    taken_at: float = field(default_factory=time.time)

    @property
    def killable(self) -> tuple[Leftover, ...]:
        """The job's own leftovers: the only ones cleanup may signal."""
        return tuple(i for i in self.items if i.identity == "job")

    @property
    def unidentified(self) -> tuple[Leftover, ...]:
        return tuple(i for i in self.items if i.identity == "unidentified")

    @property
    def silent(self) -> tuple[NodeCheck, ...]:
        return tuple(n for n in self.nodes if not n.answered)

    @property
    def clean(self) -> bool:
        """Every node answered with NVML and none holds a process of the job or an unidentified one."""
        return (
            not self.killable
            and not self.unidentified
            and not self.silent
            and all(n.nvml for n in self.nodes)
        )

    def lines(self) -> list[str]:
        """The report in sentences, for the abort modal and `cleanup`."""
        out: list[str] = []
        if self.killable:
            out.append("these processes of the job still hold GPU memory:")
            out += [f"  • {i.text()}" for i in self.killable]
        if self.unidentified:
            out.append("held by a process this node cannot identify as the job's (never signalled):")
            out += [f"  • {i.text()}: {i.reason.split(': ', 1)[-1]}" for i in self.unidentified]
        for node in self.nodes:
            if not node.answered:
                out.append(f"node {node.node_label} did not answer: {node.problem}")
            elif not node.nvml:
                out.append(
                    f"node {node.node_label}: no GPU provider answers there, its GPUs could not be read"
                )
            elif node.unlisted:
                gpus = ", ".join(f"GPU {g} ({mem} MiB)" for g, mem in node.unlisted)
                out.append(f"node {node.node_label}: {gpus} in use but NVML names no process")
        return out

    def summary(self) -> str:
        """One line: what the check came to."""
        checked = f"{len(self.nodes) - len(self.silent)} of {len(self.nodes)} node(s) answered"
        if self.clean:
            return f"no leftover GPU processes ({checked}, read on the node after the job ended)"
        parts = []
        if self.killable:
            parts.append(f"{len(self.killable)} process(es) of the job left behind")
        if self.unidentified:
            parts.append(f"{len(self.unidentified)} held by processes not provably the job's")
        nothing = "none on the node(s) that answered" if self.silent else "no leftover process listed"
        return "; ".join(parts or [nothing]) + f" ({checked})"


@dataclass(frozen=True)
class ReapResult:
    """What the kill job did to one PID."""

    node_id: str
    pid: int
    action: ReapAction
    signal: str = ""
    reason: str = ""


@dataclass(frozen=True)
class ReaperAnswer:
    """A reaper job's result lines (`items`) and its closing summary line."""

    items: tuple[Fields, ...]
    summary: Fields

    def results(self, node_id: str) -> list[ReapResult]:
        """A kill job's result lines, one per PID it was asked about."""
        return [
            ReapResult(
                node_id,
                r.integer("pid"),
                _action(r.text("action", "failed")),
                r.text("signal"),
                r.text("reason"),
            )
            for r in self.items
        ]


async def run_reaper(
    client: RayClient, node_id: str, args: list[str], *, timeout_s: float, purpose: str
) -> ReaperAnswer:
    """Run backend/cluster/reaper_job.py pinned to `node_id` (bounded by `timeout_s`) and read its answer."""
    script = Path(__file__).with_name("reaper_job.py")
    result = await run_node_job(
        client,
        node_id,
        script,
        ["--gpu-reaper", f"--node-id={node_id}", *args],
        mark=REAP_MARK,
        purpose=purpose,
        timeout_s=timeout_s,
    )
    summary = next((r for r in result.events if r.value("pid") == -1), None)
    if summary is None:
        raise ConsoleError(
            f"its reaper job ended {result.status} without an answer: {result.message or 'no message'}"
        )
    return ReaperAnswer(tuple(r for r in result.events if r.value("pid") != -1), summary)


async def read_leftovers(
    client: RayClient,
    footprint: JobFootprint | None,
    nodes: Iterable[tuple[str, str]],
    *,
    timeout_s: float,
    gone: Iterable[str] = (),
) -> LeftoverReport:
    """Read each of `nodes` ((id, label), alive) now, each answer bounded by `timeout_s`; `gone` are nodes the
    job ran on that are no longer alive (named in the report, nothing to ask there)."""
    asked = list(nodes)
    fp = footprint or JobFootprint("")
    checks = [NodeCheck(n, n[:8], False, "the node is no longer alive") for n in gone]
    answers = await asyncio.gather(
        *(
            run_reaper(client, n, ["--list", *fp.identity_args(n)], timeout_s=timeout_s, purpose="list")
            for n, _ in asked
        ),
        return_exceptions=True,
    )
    items: list[Leftover] = []
    for (node_id, label), answer in zip(asked, answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, Exception):
                raise answer
            checks.append(NodeCheck(node_id, label, False, str(answer)))
            continue
        checks.append(_node_check(node_id, label, answer.summary))
        items += [_leftover(node_id, label, r) for r in answer.items]
    return LeftoverReport(fp.submission_id or None, tuple(checks), tuple(items))


def _node_check(node_id: str, label: str, summary: Fields) -> NodeCheck:
    """A node that answered: whether NVML read, the memory no process explains, when it read."""
    return NodeCheck(
        node_id,
        label,
        True,
        nvml=summary.has("nvml"),
        unlisted=tuple(_int_pair(u) for u in summary.items("unlisted")),
        read_at=summary.real("read_at") or None,
    )


def _leftover(node_id: str, label: str, r: Fields) -> Leftover:
    """One GPU holder as the node's list job reported it."""
    return Leftover(
        node_id,
        label,
        r.integer("gpu"),
        r.integer("pid"),
        r.integer("mem_mb"),
        _identity(r.text("identity")),
        r.text("reason"),
        r.text("name"),
    )


async def kill_leftovers(
    client: RayClient,
    footprint: JobFootprint | None,
    items: Iterable[Leftover],
    *,
    grace_s: float,
    timeout_s: float,
) -> list[ReapResult]:
    """Kill exactly these PIDs, one kill job per node, each of which re-reads NVML and re-checks identity."""
    fp = footprint or JobFootprint("")
    by_node: dict[str, list[Leftover]] = {}
    for item in items:
        by_node.setdefault(item.node_id, []).append(item)
    tasks = [
        run_reaper(
            client,
            node,
            [
                *(a for it in group for a in ("--pid", str(it.pid))),
                "--grace",
                str(grace_s),
                *fp.identity_args(node),
            ],
            timeout_s=timeout_s,
            purpose="cleanup",
        )
        for node, group in by_node.items()
    ]
    results: list[ReapResult] = []
    for node, outcome in zip(by_node, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            results += [ReapResult(node, it.pid, "failed", reason=str(outcome)) for it in by_node[node]]
            continue
        results += outcome.results(node)
    return results


def footprint_from_audit(entries: Iterable[AuditEntry], job_id: str) -> JobFootprint | None:
    """The footprint the last abort of `job_id` recorded, if any."""
    for entry in reversed(list(entries)):
        fp = entry.details.get("footprint")
        if entry.job == job_id and isinstance(fp, dict):
            with contextlib.suppress(TypeError, ValueError):
                return JobFootprint.from_json(Fields(fp))
    return None


def _int_pair(value: object) -> tuple[int, int]:
    """A reaper's `[gpu, MiB]` pair (raises ValueError on anything else, as unpacking it did)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"not a pair: {value!r}")
    return as_int(value[0]), as_int(value[1])


def _identity(text: str) -> Identity:
    """A reaper's identity word; an unknown one is neither signalled nor reported, as before."""
    return cast(Identity, text) if text in ("job", "unidentified", "exempt") else "exempt"


def _action(text: str) -> ReapAction:
    return cast(ReapAction, text) if text in ("killed", "skipped", "failed", "error") else "failed"
