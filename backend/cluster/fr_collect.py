"""`collectives --job`: every rank's Flight Recorder trace, read live from a hung job, and the verdict.

Why live: gloo never dumps on a timeout, and an NCCL rank that hangs without timing out has written
nothing yet; torch's worker debug server answers from a blocked rank in under a millisecond. One
node-pinned job per alive node (backend/cluster/node_job.py, the stacks runner, on the nodes
backend.cluster.stacks.job_nodes names) runs backend/cluster/fr_job.py, which asks the job's processes
there (the stacks rule) for their trace and traceback; a node that does not answer is named with why.
The traces go through the same analyzer as gathered dumps (backend.cluster.flight_recorder), each
culprit's stack taken from its live traceback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.flight_recorder import (
    Analysis,
    RankDump,
    analyse,
    collective_cause,
    parse_dump,
    traceback_frames,
)
from backend.cluster.node_job import run_node_job
from backend.cluster.stack_groups import NodeFailure, clean
from backend.cluster.stacks import STARTUP_S, JobNodes, job_nodes
from backend.errors import ConsoleError, RefusedError
from backend.json_fields import Fields

if TYPE_CHECKING:
    from backend.signals.failures import Diagnosis

FR_MARK = "ULTRA_CONSOLE_FR "
PER_PROCESS_S = 10.0
NODE_BUDGET_S = 20.0
SCRIPT = Path(__file__).with_name("fr_job.py")
NCCL_TIMEOUT = "nccl-timeout"  # the failure kind (configs/failures.toml) the verdict completes


@dataclass(frozen=True)
class LiveTrace:
    """One process's answer: its rank (None: unknown), where it runs, its trace and stack, or why not."""

    node_label: str
    pid: int
    actor: str
    rank: int | None
    dump: RankDump | None = None
    stack: tuple[str, ...] = ()
    error: str = ""

    @property
    def label(self) -> str:
        return f"node {self.node_label}, {self.actor + ' ' if self.actor else ''}pid {self.pid}"


@dataclass(frozen=True)
class CollectivesReport:
    """The verdict over what every node answered, and who could not be read."""

    job: str
    analysis: Analysis
    traces: tuple[LiveTrace, ...]
    failed_nodes: tuple[NodeFailure, ...] = ()
    without_server: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def labels(self) -> dict[int, str]:
        return {t.rank: t.label for t in self.traces if t.rank is not None and t.dump is not None}

    def summary(self) -> str:
        ranks = self.analysis.ranks
        head = f"job {self.job}: {len(ranks)} rank(s) read live in {self.seconds:.1f} s"
        head += f" ({', '.join(map(str, ranks))})" if ranks else ""
        return head + (
            f"; {self.without_server} process(es) run no debug server" if self.without_server else ""
        )

    def verdict_line(self) -> str:
        v = self.analysis.verdict
        return v.line(self.labels) if v else ""

    def unreadable(self) -> list[str]:
        """Every process that answered without a usable trace, and every node that did not answer."""
        out = [f"{t.label}: {t.error}" for t in self.traces if t.error]
        return out + [f.line() for f in self.failed_nodes]

    def to_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            **self.analysis.to_json(self.labels),
            "processes": [
                {"rank": t.rank, "node": t.node_label, "pid": t.pid, "actor": t.actor, "error": t.error}
                for t in self.traces
            ],
            "failed_nodes": [{"node": f.node_label, "why": f.reason} for f in self.failed_nodes],
            "without_server": self.without_server,
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


def actor_of(cmd: str) -> str:
    """`ray::MegatronTrainRayActor.train` -> MegatronTrainRayActor; other command lines -> ""."""
    head = cmd.split(" ", 1)[0]
    return head[5:].split(".", 1)[0] if head.startswith("ray::") else ""


def _trace(event: Fields, label: str, by_pid: Mapping[int, int]) -> LiveTrace:
    pid = event.integer("pid")
    rank = event.raw.get("rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else by_pid.get(pid)
    base = LiveTrace(label, pid, clean(actor_of(event.text("cmd")), 80), rank)
    if event.text("error"):
        return replace(base, error=clean(event.text("error")))
    if rank is None:
        why = "its rank is unknown (neither its socket's name nor the log says which rank it is)"
        return replace(base, error=why)
    try:
        dump = parse_dump(event.raw.get("trace"), rank, f"pid {pid}")
    except ConsoleError as err:
        return replace(base, error=clean(str(err)))
    return replace(base, dump=dump, stack=traceback_frames(event.text("traceback")))


async def _node_traces(
    client: RayClient, node_id: str, label: str, args: list[str], by_pid: Mapping[int, int], budget_s: float
) -> tuple[list[LiveTrace], int, NodeFailure | None]:
    script_args = ["--fr", *args, "--per-process-s", f"{min(PER_PROCESS_S, budget_s):g}"]
    try:
        result = await run_node_job(
            client,
            node_id,
            SCRIPT,
            script_args,
            mark=FR_MARK,
            purpose="collectives",
            timeout_s=budget_s + STARTUP_S,
        )
    except ConsoleError as err:
        return [], 0, NodeFailure(node_id, label, clean(str(err)))
    summary = next((e for e in result.events if e.value("pid") == -1), None)
    if summary is None:
        why = f"its collectives job ended {result.status} without an answer: {result.message or 'no message'}"
        return [], 0, NodeFailure(node_id, label, clean(why))
    traces = [_trace(e, label, by_pid) for e in result.events if e.value("pid") != -1]
    return traces, summary.integer("without_server"), None


async def collect(
    client: RayClient,
    where: JobNodes,
    *,
    ranks: Mapping[tuple[str, int], int] | None = None,
    budget_s: float = NODE_BUDGET_S,
) -> CollectivesReport:
    """Ask every alive node of `where` at once; the analysis over every trace that came back."""
    started = time.monotonic()
    fp = where.footprint
    answers = await asyncio.gather(
        *(
            _node_traces(client, n, label, fp.identity_args(n), _ranks_on(where, ranks, n), budget_s)
            for n, label in where.nodes
        )
    )
    traces = [t for found, _, _ in answers for t in found]
    failed = [f for _, _, f in answers if f is not None]
    failed += [NodeFailure(n, n[:8], "the node is no longer alive") for n in where.gone]
    return CollectivesReport(
        fp.submission_id,
        _analyse_traces(traces),
        tuple(sorted(traces, key=lambda t: (t.rank is None, t.rank or 0, t.pid))),
        tuple(failed),
        sum(n for _, n, _ in answers),
        time.monotonic() - started,
    )


def _ranks_on(where: JobNodes, ranks: Mapping[tuple[str, int], int] | None, node: str) -> dict[int, int]:
    """The ranks of `node`'s processes by PID (`ranks` is keyed by the node's IP and the PID)."""
    ip = where.ips.get(node, "")
    return {pid: rank for (at, pid), rank in (ranks or {}).items() if at == ip}


def _analyse_traces(traces: list[LiveTrace]) -> Analysis:
    """The flight-recorder analysis over the dumps and live stacks the traces hold."""
    dumps = [t.dump for t in traces if t.dump is not None]
    stacks = {t.rank: t.stack for t in traces if t.rank is not None and t.stack}
    return analyse(dumps, live_stacks=stacks)


async def job_collectives(
    client: RayClient,
    job: JobInfo,
    *,
    ranks: Mapping[tuple[str, int], int] | None = None,
    budget_s: float = NODE_BUDGET_S,
) -> CollectivesReport:
    """The verdict of a running job, read live from every rank's debug server; refused once it ended."""
    if job.is_terminal:
        raise RefusedError(f"collectives are read live while the job runs: {job.id} is {job.status}")
    report = await collect(client, await job_nodes(client, job), ranks=ranks, budget_s=budget_s)
    if not report.traces:
        note = (
            "no process of the job runs torch's worker debug server (a socket named by "
            "TORCH_WORKER_SERVER_SOCKET, or in the run's flight_recorder folder)"
        )
        report = replace(report, notes=(note,))
    return report


def dump_folder(runtime_env: object) -> Path | None:
    """Where a job's ranks write their dumps: the folder of its `TORCH_FR_DUMP_TEMP_FILE` (every console
    launch sets it; a foreign job may), as Ray reports the job's runtime env."""
    env = Fields.of(runtime_env).obj("env_vars") if isinstance(runtime_env, dict) else None
    prefix = env.text("TORCH_FR_DUMP_TEMP_FILE") if env is not None else ""
    return Path(prefix).parent if prefix.startswith("/") else None


def with_collective_cause(found: Diagnosis | None, job: JobInfo) -> Diagnosis | None:
    """An NCCL timeout's cause completed by the flight recorder's verdict when the ranks' dumps are readable
    here (the run's output dir on shared storage): the watchdog line says a collective did not finish, the
    dumps say which rank never came. Anything else, or no readable dump, is returned as it was."""
    folder = dump_folder(job.runtime_env)
    if found is None or found.cause.id != NCCL_TIMEOUT or folder is None:
        return found
    try:
        line = collective_cause(folder)
    except (ConsoleError, OSError):
        return found
    if not line:
        return found
    cause = replace(found.cause, message=f"{found.cause.message}; the flight recorder: {clean(line, 600)}")
    return replace(found, cause=cause)
